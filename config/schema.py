"""Pydantic models of HiveD's config file, plus topogang's optional `topogang:` section.

The models accept a HiveD config unchanged: same keys, same nesting, same defaults. They check only
*shapes* (a count is an integer, `cellChildren` is a list); what the values mean together (types exist,
quotas fit) is `config.validate`'s job, which works on the plain `ClusterSpec` so that tests and the
simulator get the same checks without YAML.

Unknown keys are kept (``extra="allow"``) rather than rejected, because HiveD parses non-strictly and
real configs carry OpenPAI fields; `unknown_keys` reports them as warnings with their paths.

YAML scalars reach these models as *strings* (see `config.load`), the way Go's yaml decodes a scalar
into a string field: `cellAddress: 007` stays "007" and a node named `on` stays "on". Integer and
boolean fields then parse those strings (lax mode).
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from config.problems import ConfigWarning


def _none_to_empty_list(value: Any) -> Any:
    """`pinnedCells:` with nothing after it is YAML null; Go decodes it as an empty list."""
    return [] if value is None else value


def _none_to_empty_dict(value: Any) -> Any:
    return {} if value is None else value


def _default_if_null(default: Any) -> BeforeValidator:
    """A key written with no value (YAML null) takes HiveD's default, as a nil pointer does in Go."""
    return BeforeValidator(lambda value: default if value is None else value)


def _scalar_to_str(value: Any) -> Any:
    """Addresses and ids may be numbers when a model is built from Python data; keep them as text.

    (From YAML they are text already: see `config.load`.)"""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _cell_text(value: Any) -> Any:
    """On a cell, "" means unset, as in HiveD (`if spec.CellAddress == ""` infers the address)."""
    value = _scalar_to_str(value)
    return None if value == "" else value


def _list_or_null(item: Any) -> BeforeValidator:
    """Null means an empty list; the JSON Schema says so too, so editors accept `pinnedCells:`."""
    return BeforeValidator(_none_to_empty_list, json_schema_input_type=list[item] | None)


def _dict_or_null(item: Any) -> BeforeValidator:
    return BeforeValidator(_none_to_empty_dict, json_schema_input_type=dict[str, item] | None)


PinnedId = Annotated[str, BeforeValidator(_scalar_to_str, json_schema_input_type=str | int)]
OptionalText = Annotated[str | None, BeforeValidator(_scalar_to_str, json_schema_input_type=str | int | None)]
CellText = Annotated[str | None, BeforeValidator(_cell_text, json_schema_input_type=str | int | None)]


class _Model(BaseModel):
    """Base: camelCase keys as in HiveD, unknown keys kept for warnings, snake_case not accepted."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        extra="allow",
        frozen=True,
        field_title_generator=lambda name, info: info.alias or to_camel(name),
    )


class CellTypeModel(_Model):
    """`physicalCluster.cellTypes.<name>`: a cell made of `childCellNumber` cells of `childCellType`."""

    child_cell_type: str = Field(
        description="Type of each child. A type that is not a key of cellTypes is a leaf (GPU) type."
    )
    child_cell_number: int = Field(
        description="Number of children (at least 1).", json_schema_extra={"minimum": 1}
    )
    is_node_level: bool = Field(
        default=False, description="True if one cell of this type is exactly one Kubernetes node."
    )
    nvlinks: list[tuple[int, int]] = Field(
        default_factory=list,
        description=(
            "Optional, node-level types only: direct GPU-to-GPU links inside one node, as pairs of "
            "GPU indexes (e.g. the DGX-1's hybrid cube-mesh NVLink). Where the cell tree rates two "
            "choices of GPUs the same, placement prefers the one whose GPUs are directly linked."
        ),
    )


class PhysicalCellModel(_Model):
    """`physicalCluster.physicalCells[i]` and its `cellChildren`, recursively."""

    cell_type: CellText = Field(
        default=None, description="Required on top-level cells; children inherit childCellType."
    )
    cell_address: CellText = Field(
        default=None,
        description=(
            "Node-level cells: the Kubernetes node name (required). Leaves: the GPU index as nvidia-smi "
            "numbers it. Elsewhere: an index; omitted means inferred as HiveD does."
        ),
    )
    pinned_cell_id: CellText = Field(
        default=None, description="Pins this cell to the VC that lists this id under pinnedCells."
    )
    cell_children: Annotated[list[PhysicalCellModel], _list_or_null(PhysicalCellModel)] = Field(
        default_factory=list,
        description="Explicit children; omitted means childCellNumber default children.",
    )


class PhysicalClusterModel(_Model):
    cell_types: Annotated[dict[str, CellTypeModel], _dict_or_null(CellTypeModel)] = Field(
        default_factory=dict, description="The cell type tree, keyed by type name."
    )
    physical_cells: Annotated[list[PhysicalCellModel], _list_or_null(PhysicalCellModel)] = Field(
        default_factory=list, description="Top-level physical cells; each type here is a chain."
    )
    sku_types: Any = Field(default=None, description="OpenPAI's per-SKU resources; accepted and ignored.")


class VirtualCellModel(_Model):
    cell_type: str = Field(description='Dotted path "CHAIN.TYPE.….TYPE" from a chain down to the cell type.')
    cell_number: int = Field(
        description="How many such cells the VC is guaranteed.", json_schema_extra={"minimum": 1}
    )


class PinnedCellModel(_Model):
    pinned_cell_id: Annotated[str, BeforeValidator(_scalar_to_str, json_schema_input_type=str | int)] = Field(
        description="A pinnedCellId defined on some physical cell."
    )


class VirtualClusterModel(_Model):
    """`virtualClusters.<vc>`: the VC's quota."""

    virtual_cells: Annotated[list[VirtualCellModel], _list_or_null(VirtualCellModel)] = Field(
        default_factory=list
    )
    pinned_cells: Annotated[list[PinnedCellModel], _list_or_null(PinnedCellModel)] = Field(
        default_factory=list
    )


ENTITLEMENT_MODES = ("open", "opportunistic", "none")
EntitlementMode = Literal["open", "opportunistic", "none"]
VcQueueing = Literal["StrictFIFO", "BestEffortFIFO"]  # `extender.gangs.vc_order`
STRICT_FIFO: VcQueueing = "StrictFIFO"  # a VC's later gangs wait behind its oldest waiting one
BEST_EFFORT_FIFO: VcQueueing = "BestEffortFIFO"  # they start whenever they fit
VC_QUEUEINGS: tuple[VcQueueing, ...] = (STRICT_FIFO, BEST_EFFORT_FIFO)


class TenantModel(_Model):
    """`topogang.tenants.<namespace>`: what the pods of one namespace may ask for (the admin's word;
    `extender.gangs.entitlement` holds every pod to it before the core is asked)."""

    virtual_clusters: Annotated[list[str], _list_or_null(str)] = Field(
        default_factory=list,
        description="VCs the namespace may use (its namespaceVirtualClusters VC is always allowed).",
    )
    max_priority: int = Field(
        default=1000,
        ge=-1,
        le=1000,
        description="The highest priority its pods may ask for (-1: opportunistic only).",
    )
    pinned_cell_ids: Annotated[list[PinnedId] | None, _list_or_null(str)] = Field(
        default=None,
        description="Pinned cells it may use; omitted: every pinned cell of its VCs; empty (or null): none.",
    )
    max_reserved_gpus: int | None = Field(
        default=None,
        ge=0,
        description=(
            "The most GPUs its gangs may hold at once in reservations no pod is bound to yet; a new "
            "gang that would pass it waits [TenantLimit], reserving and preempting nothing. Omitted "
            "(or null): topogang.defaultMaxReservedGpus."
        ),
    )


class TopogangModel(_Model):
    """topogang's own settings; HiveD ignores this key, so one file can serve both."""

    namespace_virtual_clusters: Annotated[dict[str, str], _dict_or_null(str)] = Field(
        default_factory=dict,
        description="Kubernetes namespace -> VC, for pods whose scheduling spec names no virtualCluster.",
    )
    reservation_ttl_seconds: int = Field(
        default=300,
        gt=0,
        le=2**31 - 1,  # a deadline past it is one no GangReservation or ledger timestamp can write
        description="A gang reservation whose members have not all arrived expires after this many seconds.",
    )
    listen_address: OptionalText = Field(
        default=None, description="Extender listen address (host:port); defaults to webServerAddress."
    )
    default_max_reserved_gpus: int | None = Field(
        default=None,
        ge=0,
        description=(
            "maxReservedGpus of every namespace whose tenants entry sets none (or that has no entry). "
            "Omitted (or null): no limit, as in HiveD."
        ),
    )
    tenants: Annotated[dict[str, TenantModel], _dict_or_null(TenantModel)] = Field(
        default_factory=dict,
        description="Kubernetes namespace -> the VCs, pinned cells and highest priority its pods may use.",
    )
    vc_queueing: VcQueueing = Field(
        default=STRICT_FIFO,
        description=(
            "The order a VC's gangs start in: StrictFIFO, a gang not yet placed waits behind the "
            "oldest gang of its VC (at its priority or above) that waits for room; BestEffortFIFO, "
            "later gangs go on whenever they fit (kube-scheduler's own order)."
        ),
    )
    default_entitlement: EntitlementMode | None = Field(
        default=None,
        description=(
            "What a namespace without a tenants entry may use: open (every VC at every priority, "
            "HiveD's trust), opportunistic (its namespaceVirtualClusters VC, else priority -1 only), "
            "none (its namespaceVirtualClusters VC, else nothing). Unset: `serve "
            "--default-entitlement` (open by default; the Helm chart sets opportunistic)."
        ),
    )


class HivedConfigModel(_Model):
    """The whole file. Top-level keys and defaults are HiveD's (`pkg/api/config.go`)."""

    kube_api_server_address: OptionalText = Field(
        default=None, description="Default $KUBE_APISERVER_ADDRESS."
    )
    kube_config_file_path: OptionalText = Field(default=None, description="Default $KUBECONFIG.")
    web_server_address: Annotated[str, _default_if_null(":9096")] = Field(
        default=":9096", description="HiveD's listen address."
    )
    force_pod_bind_threshold: Annotated[int, _default_if_null(3)] = Field(
        default=3, description="Accepted for compatibility (topogang binds through kube-scheduler)."
    )
    waiting_pod_scheduling_block_milli_sec: Annotated[int, _default_if_null(0)] = Field(
        default=0, description="Accepted for compatibility (topogang never sleeps under a lock)."
    )
    physical_cluster: PhysicalClusterModel
    virtual_clusters: Annotated[dict[str, VirtualClusterModel], _dict_or_null(VirtualClusterModel)] = Field(
        default_factory=dict, description="VC name -> quota."
    )
    quota_exclude_vcs: Annotated[list[str], _list_or_null(str)] = Field(
        default_factory=list, alias="quotaExcludeVCs", description="A later HiveD key; accepted and ignored."
    )
    topogang: TopogangModel = Field(default_factory=TopogangModel)

    @property
    def listen_address(self) -> str:
        """Where the extender listens: `topogang.listenAddress`, else HiveD's `webServerAddress`."""
        return self.topogang.listen_address or self.web_server_address


def _known_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def unknown_keys(model: BaseModel, path: str = "") -> list[ConfigWarning]:
    """Every key the models did not recognise, with its dotted path and a spelling hint.

    They are warnings, not errors: HiveD ignores them too, and a typo in an optional key is worth a
    loud hint but not a refused config."""
    found: list[ConfigWarning] = []
    for key in model.model_extra or {}:
        hint = difflib.get_close_matches(key, _known_keys(type(model)), n=1, cutoff=0.6)
        reason = f"unknown key {key!r} is ignored" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        found.append(ConfigWarning(f"{path}.{key}" if path else key, reason))
    for name, field in type(model).model_fields.items():
        key = field.alias or name
        value = getattr(model, name)
        sub = f"{path}.{key}" if path else key
        if isinstance(value, BaseModel):
            found.extend(unknown_keys(value, sub))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found.extend(unknown_keys(item, f"{sub}[{i}]"))
        elif isinstance(value, dict):
            for k, item in value.items():
                if isinstance(item, BaseModel):
                    found.extend(unknown_keys(item, f"{sub}.{k}"))
    return found


def json_schema() -> dict[str, Any]:
    """The JSON Schema editors use (yaml-language-server: `# yaml-language-server: $schema=…`)."""
    schema = HivedConfigModel.model_json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "topogang / HiveD scheduler config",
        **{k: v for k, v in schema.items() if k != "title"},
    }
