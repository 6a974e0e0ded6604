"""Operating every node of the cluster from one machine: ``sparkpair up|down|status|logs``.

:mod:`.spec` reads the cluster file and every node's env file and refuses a cluster whose
nodes disagree; :mod:`.engines` reaches each node's Docker engine; :mod:`.ops` drives the
same ``compose.yaml`` on every node (docs/operations.md).
"""
