"""arenarl_jax: tournament-based RL for open-ended LLM agents, in JAX/Flax."""
import setuptools

setuptools.setup(
    name="arenarl_jax",
    version="0.1.0",
    description="ArenaRL in JAX/Flax: tournament-ranked RL for open-ended LLM agents.",
    packages=setuptools.find_packages(include=["arenarl_jax", "arenarl_jax.*"]),
    # Non-Python files the installed package reads: the C++ sources of the CPU attention kernel,
    # compiled on first use (models/cpu/build.py), and the pinned SFT starts (sft/start.py's
    # STARTS_DIR: starts/<name>/ with *.safetensors, *.json, ...), at any depth under starts/.
    # `pip wheel . -w dist` packs them; check with `unzip -l dist/arenarl_jax-*.whl`.
    package_data={"arenarl_jax": ["models/cpu/*.cc", "models/cpu/*.h",
                                  "starts/*", "starts/**/*"]},
    python_requires=">=3.11",
    # Ranges, not pins: the GPU machine ships its own jax/flax (0.11 era) and we must run there too.
    install_requires=[
        "jax>=0.6",
        "flax>=0.11",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        "transformers>=5.0,<6",  # tokenizers, configs, chat templates only (no Flax models in 5.x)
        "tokenizers>=0.21",
        "safetensors>=0.4",
        "ml-collections>=1.0",
        "tensorflow-datasets>=4.9",  # array_record data sources only; no TensorFlow
        "array-record>=0.5",  # the file format tensorflow-datasets writes and reads without TF
        "grain>=0.2.18",  # input pipelines over tfds.data_source
        "importlib-resources>=6",  # needed by tensorflow-datasets' download_and_prepare
        "gguf>=0.17",
        "jinja2>=3.1",
        "absl-py>=2.0",
        "numpy>=1.26",
        "httpx>=0.27,<1",  # async OpenAI-compatible judge client
        "mcp>=1.30,<2",  # Model Context Protocol SDK: tool server and client (envs/mcp_*.py)
        "matplotlib>=3.8",  # experiment plots
        "bm25s>=0.2.6,<0.4",  # BM25 search of the offline research environment
        "tensorboardX>=2.6",  # TensorBoard event files without TensorFlow (metrics.py)
        "tqdm>=4.60",  # progress bars with ETA
        "scipy>=1.10",  # t quantiles of the evaluation's intervals
        "anyio>=4",  # the MCP client's streams
    ],
    extras_require={
        # torch + accelerate are only the reference implementation in tests and benchmarks;
        # selenium drives headless Chromium in the run viewer's test (tests/view/test_view.py);
        # nbclient, nbformat and ipykernel execute the colabs (tests/test_colabs.py).
        "test": ["pytest>=8", "chex>=0.1.87", "torch==2.13.0", "accelerate>=1.0", "psutil>=5.9",
                 "pytest-xdist>=3.5", "selenium>=4.11", "nbclient>=0.10", "nbformat>=5.10",
                 "ipykernel>=6.29"],
    },
    entry_points={"console_scripts": ["arenarl=arenarl_jax.main:run"]},
)
