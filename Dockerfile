# sparkpair image: vLLM (pinned) + the sparkpair overlay plugin, health suite and CLI, with
# sparkpair's Triton kernels AOT-compiled for GB10 (sm_121a) at build time.
#
#   docker build --platform linux/arm64 -t sparkpair:0.1.0 .
#
# Build args:
#   VLLM_IMAGE_TAG          vllm/vllm-openai tag (default v0.33.0: the release whose image's own packages
#                           the stack tier ran). v0.34.0 is verified to patch too and builds with
#                           --build-arg VLLM_IMAGE_TAG=v0.34.0; why it is not the default, and what to
#                           check on it: docs/operations.md, "Upgrading vLLM". The build fails on a base
#                           whose vLLM is not verified to patch (sparkpair_overlay.versions)
#   SPARKPAIR_ALLOW_UNVERIFIED_VLLM  1 = build on such a base anyway (the node still refuses it on
#                           GB10 unless the same variable is set at run time)
#   TRITON_PTXAS_PATH       a ptxas that knows sm_121a (CUDA >= 12.9); Triton's bundled `ptxas`
#                           does not (field bug B01) -- checked below, the build fails otherwise.
#                           Triton >= 3.5 assembles sm_100+ with TRITON_PTXAS_BLACKWELL_PATH
#                           (default: its bundled CUDA 12.9 `ptxas-blackwell`); both are set.
#   SPARKPAIR_KERNEL_ARCHS  targets of the AOT kernel build (sm_121a); the build fails if any
#                           kernel config does not compile or exceeds GB10's shared memory
#   EXPECT_ARCH             the machine the image is for (aarch64: DGX Spark)
#
# FlashInfer: not AOT-built here. FlashInfer 0.7.x moved ahead-of-time kernels to the
# separate flashinfer-jit-cache build, whose module list is fixed (flashinfer/aot.py); the
# DeepSeek-V4 SM120 sparse-MLA decode path could not be verified to be in it without an
# aarch64 GB10 build. Its JIT output goes to a persistent volume instead
# (FLASHINFER_WORKSPACE_BASE in compose.yaml), so it compiles once per node, not per start.
ARG VLLM_IMAGE_TAG=v0.33.0
FROM vllm/vllm-openai:${VLLM_IMAGE_TAG}

ARG VLLM_IMAGE_TAG=v0.33.0
ARG SPARKPAIR_ALLOW_UNVERIFIED_VLLM=0
ARG TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas
ARG SPARKPAIR_KERNEL_ARCHS=sm_121a
ARG EXPECT_ARCH=aarch64
ARG SPARKPAIR_VERSION=0.1.0

LABEL org.opencontainers.image.title="sparkpair" \
      org.opencontainers.image.description="DeepSeek-V4-Flash on vLLM across DGX Spark nodes (GB10, TP over RoCE)" \
      org.opencontainers.image.version="${SPARKPAIR_VERSION}" \
      org.opencontainers.image.base.name="vllm/vllm-openai:${VLLM_IMAGE_TAG}" \
      io.sparkpair.vllm.image-tag="${VLLM_IMAGE_TAG}" \
      io.sparkpair.overlay.version="${SPARKPAIR_VERSION}" \
      io.sparkpair.kernel-cache.targets="${SPARKPAIR_KERNEL_ARCHS}" \
      io.sparkpair.kernel-cache.path="/opt/sparkpair/triton-cache"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# GB10 is compute capability 12.1 ("12.1a" for arch-specific features); JIT builders
# (torch extensions, FlashInfer, DeepGEMM, CuTe-DSL) target it, and Triton assembles with
# a ptxas that knows it (B01).
ENV TORCH_CUDA_ARCH_LIST="12.1a" \
    FLASHINFER_CUDA_ARCH_LIST="12.1a" \
    CUTE_DSL_ARCH="sm_121a" \
    TRITON_PTXAS_PATH="${TRITON_PTXAS_PATH}" \
    TRITON_PTXAS_BLACKWELL_PATH="${TRITON_PTXAS_PATH}" \
    SPARKPAIR_AOT_TRITON_CACHE="/opt/sparkpair/triton-cache" \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PYTHONUNBUFFERED=1

# Refuse to build for the wrong machine, and a ptxas that rejects sm_121a (B01).
RUN test "$(uname -m)" = "${EXPECT_ARCH}" \
      || { echo "sparkpair: image built on $(uname -m); wanted ${EXPECT_ARCH} (docker build --platform linux/arm64)"; exit 1; } \
 && printf '.version 8.8\n.target sm_121a\n.address_size 64\n.visible .entry sparkpair_probe() { ret; }\n' > /tmp/probe.ptx \
 && "${TRITON_PTXAS_PATH}" --gpu-name=sm_121a /tmp/probe.ptx -o /dev/null \
      || { echo "sparkpair: TRITON_PTXAS_PATH=${TRITON_PTXAS_PATH} does not accept sm_121a; wanted CUDA >= 12.9's ptxas (B01)"; exit 1; } \
 && rm -f /tmp/probe.ptx

WORKDIR /opt/sparkpair/src

# sparkpair's own dependencies, installed without moving any package the base image (vLLM)
# already pins: the base's versions are constraints. First, so that edits to the sources
# reuse this layer (it needs the network; the steps below do not).
RUN python3 -m pip freeze --exclude-editable | grep -v '^-e ' | grep '==' > /tmp/base-constraints.txt \
 && python3 -m pip install -c /tmp/base-constraints.txt \
      "typer>=0.12" "pydantic>=2.9" "pydantic-settings>=2.7" "httpx>=0.27" "rich>=13" "PyYAML>=6" "jsonschema>=4" \
      "fastapi>=0.115" "uvicorn>=0.30" "prometheus-client>=0.20" "docker>=7" \
 && rm -f /tmp/base-constraints.txt

COPY pyproject.toml README.md ./
COPY overlay/ overlay/
COPY healthchecks/ healthchecks/
COPY scripts/ scripts/

# Editable install: setuptools' finder maps sparkpair_overlay, sparkpair_serving, sparkpair_health
# and sparkpair_cli to /opt/sparkpair/src/{overlay,healthchecks,scripts}, so compose's read-only
# bind mount of ./overlay over that path takes effect on restart without a rebuild. The
# plugin entry point (vllm.general_plugins) is registered. No Ray: vLLM's multi-node `mp`
# executor is the only one (vLLM no longer depends on Ray).
RUN python3 -m pip install --no-deps -e . \
 && python3 -c "import vllm, sparkpair_overlay, sparkpair_serving, sparkpair_health, sparkpair_cli.main; print('sparkpair: vLLM', vllm.__version__)" \
 && python3 -c "import sparkpair_overlay as m; assert m.__file__.startswith('/opt/sparkpair/src/overlay/'), m.__file__"

# The base's vLLM must be a release the overlay is verified to patch (its record says how far, and
# which packages its test tier substituted); the plan GB10 would take here shows whether vLLM's DeepGEMM
# finds the nvcc it needs (vLLM 0.34: >= 12.9, else wo_a stays 2-D and the default
# --linear-backend auto is refused at construction).
RUN python3 -c "import sys, vllm; from sparkpair_overlay.versions import is_verified, proof_line; print('sparkpair:', proof_line(vllm.__version__)); sys.exit(0 if is_verified(vllm.__version__) or '${SPARKPAIR_ALLOW_UNVERIFIED_VLLM}' == '1' else 'sparkpair: the base image vLLM ' + vllm.__version__ + ' is not verified to patch; wanted a release in sparkpair_overlay.versions.RELEASES (scripts/vllm-lane.sh proves one), or --build-arg SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1')" \
 && SPARKPAIR_FAKE_CAPABILITY=12.1 SPARKPAIR_ALLOW_UNVERIFIED_VLLM="${SPARKPAIR_ALLOW_UNVERIFIED_VLLM}" sparkpair plan

# The Triton that compiles our kernels here and at run time is the base's (vLLM 0.33's torch
# 2.14 requires triton~=3.8.0); the kernels are built and tested with the pin of pyproject.toml's
# `kernels` extra. Print it, and fail the build when its release series differs from the pin:
# Triton 3.6 would build sm_121a kernels with f16-upcast MMAs (docs/reference/triton-gb10.md).
RUN python3 -c "import triton, torch; print('sparkpair: Triton', triton.__version__, 'torch', torch.__version__)" \
 && python3 -c "import sys; from sparkpair_overlay.kernels._common import triton_problem as p; m = p(); sys.exit('sparkpair: ' + m if m else 0)"

# sparkpair's Triton kernels, AOT-compiled into the cache the image ships (the node copies
# it into the persistent TRITON_CACHE_DIR volume at start). Fails the build on any error.
RUN if [ -n "${SPARKPAIR_KERNEL_ARCHS}" ]; then \
      sparkpair kernels build --arch "${SPARKPAIR_KERNEL_ARCHS}" --cache-dir /opt/sparkpair/triton-cache --quiet; \
    else \
      echo "sparkpair: SPARKPAIR_KERNEL_ARCHS empty: no AOT kernel cache (test builds only)"; \
      mkdir -p /opt/sparkpair/triton-cache; \
    fi

# Profiles last: editing one rebuilds only this layer (compose also bind-mounts
# ./configs/profiles). Model and bench profiles only: the image is copied to every node, so no
# node env, cluster or key file may be in it (.dockerignore sends nothing else of configs/).
COPY configs/profiles/ configs/profiles/
COPY configs/bench/ configs/bench/

WORKDIR /vllm-workspace
ENTRYPOINT ["sparkpair"]
CMD ["--help"]
