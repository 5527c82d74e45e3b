"""`VlaRsConfig`: the lerobot policy config of type `vla_rs` (a policy served by vla-server).

Every field is a command-line option of lerobot's scripts, e.g.
`--policy.type=vla_rs --policy.server=tcp://127.0.0.1:5555 --policy.n_action_steps=10`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import FeatureType, NormalizationMode
from lerobot.utils.constants import ACTION, OBS_STATE

INFERENCE_ONLY = (
    "the vla_rs policy is inference-only: the model runs in vla-server, which loads a GGUF. "
    "Train with lerobot's own policy (e.g. --policy.type=smolvla), then convert the checkpoint "
    "with `vla-convert` and serve it with `vla-server MODEL.gguf`."
)

IMAGE_ENCODINGS = ("uint8", "float")


@PreTrainedConfig.register_subclass("vla_rs")
@dataclass
class VlaRsConfig(PreTrainedConfig):
    """A policy whose model runs in vla-server (or a vla.cpp server), reached over ZeroMQ.

    The server normalises the state and un-normalises the actions itself, so the lerobot side
    does no normalisation (`normalization_mapping` is identity for every feature type).
    """

    # Where vla-server listens: tcp://HOST:PORT, ipc://PATH or inproc://NAME.
    server: str = "tcp://127.0.0.1:5555"
    # Actions of each chunk to execute before asking the server again; None: the model's own
    # (its INFO's `n_action_steps`, which ACT files keep), else the whole chunk the server
    # returns (INFO's `action_rows`). More than the chunk is an error.
    n_action_steps: int | None = None
    # ACT's temporal ensembling (lerobot's `temporal_ensemble_coeff`, the ACT paper's 0.01):
    # every step asks the server for a chunk and executes the average of every chunk's
    # prediction for that step, weighted exp(-coeff * i), i = 0 the oldest. None: off.
    # Needs n_action_steps None or 1, as lerobot's.
    temporal_ensemble_coeff: float | None = None
    # Seconds to wait for one reply. The first request with frames of a new size makes the
    # server compile its graphs for that size, which takes about as long as loading the model.
    timeout_s: float = 120.0
    # The observation features (e.g. observation.images.top) to send as the server's cameras,
    # in the server's camera order; a name may repeat. None: the policy's visual input
    # features in the order the environment / dataset lists them.
    cameras: list[str] | None = None
    # How frames go on the wire: "uint8" (RGB_U8, 1 byte a value) or "float" (F32_RGB_01).
    image_encoding: str = "uint8"
    # The batch key that holds the instruction (a string, or one string a batch element).
    task_key: str = "task"
    # A fixed instruction sent instead of batch[task_key] (for environments without a task).
    prompt: str | None = None
    # Opt-in adapters for a model whose dims differ from the environment's (both off: any
    # difference is an error at the first call). pad_state: zero-pad observation.state up to
    # the server's state_dim (an environment without a state sends zeros). truncate_actions:
    # keep the first action dims of the server's actions, as many as the environment has.
    pad_state: bool = False
    truncate_actions: bool = False

    normalization_mapping: dict[str, NormalizationMode] = field(
        default_factory=lambda: {
            "VISUAL": NormalizationMode.IDENTITY,
            "STATE": NormalizationMode.IDENTITY,
            "ENV": NormalizationMode.IDENTITY,
            "ACTION": NormalizationMode.IDENTITY,
        }
    )

    # Nothing runs locally but tensor copies: the CPU by default.
    device: str | None = "cpu"
    # There are no weights to upload.
    push_to_hub: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_action_steps is not None and self.n_action_steps < 1:
            raise ValueError(f"n_action_steps must be at least 1 (or None: the whole chunk), got {self.n_action_steps}")
        if self.temporal_ensemble_coeff is not None and self.n_action_steps not in (None, 1):
            raise ValueError(
                f"temporal_ensemble_coeff asks for a chunk every step: n_action_steps must be 1 "
                f"(or None), got {self.n_action_steps}"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.image_encoding not in IMAGE_ENCODINGS:
            raise ValueError(f"image_encoding must be one of {IMAGE_ENCODINGS}, got {self.image_encoding!r}")
        if self.cameras is not None and len(self.cameras) == 0:
            raise ValueError("cameras is empty: name at least one image feature, or leave it unset")

    # --- what lerobot asks of a config; a served policy has no training side ---------------

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> None:
        return None

    @property
    def reward_delta_indices(self) -> None:
        return None

    def get_optimizer_preset(self):
        raise NotImplementedError(INFERENCE_ONLY)

    def get_scheduler_preset(self):
        raise NotImplementedError(INFERENCE_ONLY)

    def validate_features(self) -> None:
        """The features the policy needs, checked against what lerobot filled in from the
        environment or dataset (the server's own dims are checked at the first call)."""
        outputs = self.output_features or {}
        if ACTION not in outputs:
            raise ValueError(f"the vla_rs policy needs an '{ACTION}' output feature; got {sorted(outputs)}")
        visual = self.camera_features
        if not visual:
            inputs = self.input_features or {}
            raise ValueError(f"the vla_rs policy needs at least one image input feature; the inputs are {sorted(inputs)}")
        if self.cameras is not None:
            unknown = [c for c in self.cameras if c not in self.image_features]
            if unknown:
                raise ValueError(
                    f"--policy.cameras names {unknown}, which are not image features of the environment / "
                    f"dataset; its image features are {list(self.image_features)}"
                )

    @property
    def camera_features(self) -> list[str]:
        """The features sent as the server's cameras, in its order."""
        if self.cameras is not None:
            return list(self.cameras)
        return [k for k, ft in (self.input_features or {}).items() if ft.type is FeatureType.VISUAL]

    @property
    def state_dim(self) -> int | None:
        """observation.state's length, None without one."""
        ft = (self.input_features or {}).get(OBS_STATE)
        return int(ft.shape[0]) if ft is not None else None

    @property
    def action_dim(self) -> int | None:
        ft = (self.output_features or {}).get(ACTION)
        return int(ft.shape[0]) if ft is not None else None
