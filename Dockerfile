# One image for the head and every worker of a rayrl Ray cluster.
#
#   docker build -t rayrl:0.1.0 .                                      # CPU nodes
#   docker build --build-arg VARIANT=gpu -t rayrl:0.1.0-gpu .          # GPU nodes (CUDA torch)
#   docker build --build-arg EXTRAS=cluster -t rayrl:0.1.0-slim .      # without MinAtar, MuJoCo
#
# The base is Ray's official image at the Ray version rayrl is tested with, so the Ray
# inside the container matches the Ray of the cluster it joins (a mismatch refuses to
# connect). tests/integration/test_cluster_files.py checks the tag, the Python version
# and the install command against pyproject.toml and the README.
ARG RAY_VERSION=2.60.0
ARG PYTHON_TAG=py311
ARG VARIANT=cpu
FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${VARIANT}
ARG VARIANT

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

WORKDIR /home/ray/rayrl
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users rayrl ./rayrl

# CPU images take PyTorch's CPU wheel (a few hundred MB instead of several GB of CUDA
# libraries); GPU images take the default CUDA build from PyPI.
RUN if [ "$VARIANT" = "cpu" ]; then \
        pip install torch --index-url https://download.pytorch.org/whl/cpu; \
    fi
# The README's install command.
RUN pip install .
# The extras: Ray's dashboard and job server (`cluster`: every node of a cluster runs
# them), and the env families MinAtar (the sweeps' and learning presets' games) and MuJoCo
# (continuous control). `--build-arg EXTRAS=cluster` leaves the env families out.
ARG EXTRAS=cluster,minatar,mujoco
RUN if [ -n "$EXTRAS" ]; then pip install ".[$EXTRAS]"; fi

# Ray's own entry points (ray start, ray job submit) stay the image's commands; rayrl's
# CLI is on PATH for `ray job submit -- rayrl train ...`.
WORKDIR /home/ray
