"""`VlaRsPolicy`: a lerobot policy whose model runs in vla-server.

Each call of `predict_action_chunk` sends one PredictRequest a batch element (images, state and
instruction) through `vla_client` and stacks the replies' action chunks; `select_action` keeps
a queue of actions, as lerobot's chunking policies do, and asks the server again when the
queue is empty (every `n_action_steps` steps), or with `temporal_ensemble_coeff` asks every step
and averages the chunks' predictions for it (ACT's temporal ensembling, on the client as
vla.cpp leaves it).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch
from torch import Tensor

from lerobot.policies.pretrained import PreTrainedPolicy
from lerobot.utils.constants import OBS_STATE

from .configuration_vla_rs import INFERENCE_ONLY, VlaRsConfig


class VlaRsMismatchError(ValueError):
    """The served model does not fit the environment's / dataset's features."""


class VlaRsPolicy(PreTrainedPolicy):
    config_class = VlaRsConfig
    name = "vla_rs"

    def __init__(self, config: VlaRsConfig, **kwargs):
        # lerobot's factory may pass dataset_stats / dataset_meta: the server has its own.
        super().__init__(config)
        config.validate_features()
        self.config: VlaRsConfig = config
        self._client = None
        self._info: dict | None = None
        self._queue: deque[Tensor] = deque()
        self._ensembler = (
            None if config.temporal_ensemble_coeff is None else TemporalEnsembler(config.temporal_ensemble_coeff)
        )
        self.server_calls = 0  # PredictRequests sent (one a batch element)

    # --- the server ------------------------------------------------------------------------

    @property
    def client(self):
        if self._client is None:
            from vla_client import VlaClient

            self._client = VlaClient(self.config.server, timeout_ms=max(1, int(self.config.timeout_s * 1000)))
        return self._client

    @property
    def server_info(self) -> dict:
        """The server's INFO (asked once), checked against the policy's features."""
        if self._info is None:
            info = self.client.info()
            self._check_info(info)
            self._info = info
        return self._info

    def _check_info(self, info: dict) -> None:
        cfg = self.config
        what = f"vla-server at {cfg.server} serves {info.get('arch', '?')}"
        problems = []

        cams = cfg.camera_features
        n_images = int(info["n_images"])
        if len(cams) != n_images:
            problems.append(
                f"cameras: the server's model takes {n_images} camera view(s), the policy would send "
                f"{len(cams)}: {cams}; set --policy.cameras to {n_images} image feature names in the "
                f"server's camera order (a name may repeat)"
            )

        state_dim, max_state_dim = int(info["state_dim"]), int(info.get("max_state_dim", info["state_dim"]))
        env_state = cfg.state_dim
        if state_dim == 0:
            pass  # the model reads no state (an ACT trained without one): nothing is sent
        elif env_state is None:
            if not cfg.pad_state:
                problems.append(
                    f"state: the server's model takes a state of {state_dim} values, the environment / dataset "
                    f"has no '{OBS_STATE}' feature (--policy.pad_state=true sends zeros)"
                )
        elif env_state not in (state_dim, max_state_dim) and not (cfg.pad_state and env_state < state_dim):
            hint = " (--policy.pad_state=true zero-pads it)" if env_state < state_dim else ""
            problems.append(
                f"state: the server's model takes {state_dim} values, the environment's / dataset's "
                f"'{OBS_STATE}' has {env_state}{hint}"
            )

        action_dim = int(info["action_dim"])
        env_action = cfg.action_dim
        if env_action != action_dim and not (cfg.truncate_actions and env_action < action_dim):
            hint = " (--policy.truncate_actions=true keeps the first ones)" if env_action < action_dim else ""
            problems.append(
                f"actions: the server's model returns {action_dim} values an action, the environment's / "
                f"dataset's 'action' has {env_action}{hint}"
            )

        rows = int(info.get("action_rows", info["chunk_size"]))
        if cfg.n_action_steps is not None and cfg.n_action_steps > rows:
            problems.append(f"n_action_steps: {cfg.n_action_steps}, more than the {rows} actions of the server's chunks")

        if problems:
            raise VlaRsMismatchError(
                f"{what}, which does not fit this policy's features:\n  - " + "\n  - ".join(problems)
            )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- lerobot's policy interface --------------------------------------------------------

    def reset(self) -> None:
        """Called by lerobot when the environment is reset: drops the queued actions (and the
        ensembled ones)."""
        self._queue.clear()
        if self._ensembler is not None:
            self._ensembler.reset()

    def get_optim_params(self) -> dict:
        raise NotImplementedError(INFERENCE_ONLY)

    def forward(self, batch: dict[str, Tensor], **kwargs):
        raise NotImplementedError(INFERENCE_ONLY)

    @torch.no_grad()
    def predict_action_chunk(self, batch: dict[str, Tensor], noise: Tensor | None = None, **kwargs) -> Tensor:
        """[B, rows, action_dim] actions, one server request a batch element. `noise`, if
        given: [B, chunk_size, max_action_dim] (or one [chunk_size, max_action_dim] for all)."""
        info = self.server_info
        cfg = self.config
        cams = cfg.camera_features
        missing = [k for k in cams if k not in batch]
        if missing:
            raise KeyError(f"the batch has no {missing} (its keys: {sorted(batch)}); the policy sends {cams}")

        b = batch[cams[0]].shape[0]
        device = batch[cams[0]].device
        images = {k: _frames(batch[k], cfg.image_encoding) for k in dict.fromkeys(cams)}
        states = self._states(batch, b, int(info["state_dim"]))
        prompts = self._prompts(batch, b)
        noises = _per_element(noise, b)

        # Without --policy.cameras, and where the served file keeps lerobot's camera names,
        # the images go by name: the server puts them in the model's order, or refuses names
        # that are not the model's (naming both lists) instead of a silent mix-up.
        by_name = cfg.cameras is None and bool(info.get("camera_names"))
        chunks = []
        for i in range(b):
            chunk = self.client.predict(
                images={k: images[k][i] for k in cams} if by_name else [images[k][i] for k in cams],
                state=states[i],
                prompt=prompts[i],
                noise=noises[i],
            )
            self.server_calls += 1
            if cfg.truncate_actions:
                chunk = chunk[:, : cfg.action_dim]
            chunks.append(chunk)
        return torch.from_numpy(np.stack(chunks)).to(device=device, dtype=torch.float32)

    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], noise: Tensor | None = None, **kwargs) -> Tensor:
        """[B, action_dim]: the next queued action, after a server call when the queue is empty
        (with temporal ensembling: the ensembled action, after a server call every step)."""
        if self._ensembler is not None:
            return self._ensembler.update(self.predict_action_chunk(batch, noise=noise))
        if not self._queue:
            chunk = self.predict_action_chunk(batch, noise=noise)
            own = self.server_info.get("n_action_steps")
            n = self.config.n_action_steps or own or chunk.shape[1]
            self._queue.extend(chunk[:, :n].transpose(0, 1))  # n tensors of [B, action_dim]
        return self._queue.popleft()

    # --- batch -> request fields -----------------------------------------------------------

    def _states(self, batch: dict, b: int, server_dim: int) -> list[np.ndarray]:
        if server_dim == 0:
            return [np.zeros(0, np.float32)] * b  # a model without a state (ACT can be)
        if OBS_STATE not in batch:
            if self.config.pad_state:
                return [np.zeros(server_dim, np.float32)] * b
            raise KeyError(f"the batch has no '{OBS_STATE}' (its keys: {sorted(batch)})")
        s = batch[OBS_STATE].detach().to("cpu", torch.float32).reshape(b, -1).numpy()
        if self.config.pad_state and s.shape[1] < server_dim:
            s = np.concatenate([s, np.zeros((b, server_dim - s.shape[1]), np.float32)], axis=1)
        return list(s)

    def _prompts(self, batch: dict, b: int) -> list[str | None]:
        if not self.server_info.get("reads_instruction", True):
            return [None] * b  # ACT: the model takes no instruction
        if self.config.prompt is not None:
            return [self.config.prompt] * b
        task = batch.get(self.config.task_key)
        if task is None or isinstance(task, str):
            return [task] * b
        task = list(task)
        if len(task) == 1 and b > 1:
            task = task * b
        if len(task) != b:
            raise ValueError(f"batch['{self.config.task_key}'] has {len(task)} entries for a batch of {b}")
        return [str(t) for t in task]


def _frames(x: Tensor, encoding: str) -> np.ndarray:
    """lerobot's [B, C, H, W] frames (float in [0, 1], or uint8) -> [B, H, W, 3] numpy, uint8
    or float32 as `encoding` says."""
    if x.ndim == 3:
        x = x.unsqueeze(0)
    if x.ndim != 4:
        raise ValueError(f"image tensor of shape {tuple(x.shape)}: expected [batch, channels, height, width]")
    x = x.detach().to("cpu")
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    if x.shape[1] != 3:
        raise ValueError(f"image tensor of shape {tuple(x.shape)}: expected 3 (RGB) channels first")
    x = x.permute(0, 2, 3, 1)
    if encoding == "uint8":
        if x.dtype != torch.uint8:
            x = (x.float().clamp(0, 1) * 255).round().to(torch.uint8)
    else:
        x = x.float() / 255 if x.dtype == torch.uint8 else x.float().clamp(0, 1)
    return x.contiguous().numpy()


def _per_element(noise: Tensor | None, b: int) -> list:
    if noise is None:
        return [None] * b
    n = noise.detach().to("cpu", torch.float32)
    if n.ndim == 2:
        return [n.numpy()] * b
    if n.shape[0] != b:
        raise ValueError(f"noise of shape {tuple(n.shape)} for a batch of {b}")
    return list(n.numpy())


class TemporalEnsembler:
    """ACT's temporal ensembling, online: after each chunk of T predictions, the action for the
    current step is the average of every prediction made for it so far, the k-th oldest weighted
    w_k = exp(-coeff * k). Kept per step are the running averages and how many predictions each
    holds; a new chunk folds its first T - 1 rows into the averages of the steps they predict,
    brings a fresh last row, and the first step's average is executed and dropped."""

    def __init__(self, coeff: float):
        self.coeff = float(coeff)
        self.reset()

    def reset(self) -> None:
        self.avg: Tensor | None = None  # [B, steps, action_dim]
        self.count: Tensor | None = None  # [steps] predictions per step

    def update(self, chunk: Tensor) -> Tensor:
        """`chunk` [B, T, action_dim] predicted now -> the ensembled action [B, action_dim]."""
        t = chunk.shape[1]
        w = torch.exp(-self.coeff * torch.arange(t, dtype=torch.float64))
        cum = torch.cumsum(w, 0)
        chunk = chunk.to(torch.float64)
        if self.avg is None:
            self.avg, self.count = chunk.clone(), torch.ones(t, dtype=torch.long)
        else:
            # running weighted average of n predictions -> of n + 1
            n = self.count
            folded = (self.avg * cum[n - 1, None] + chunk[:, :-1] * w[n, None]) / cum[n, None]
            self.avg = torch.cat([folded, chunk[:, -1:]], dim=1)
            self.count = torch.cat([torch.clamp(n + 1, max=t), torch.ones(1, dtype=torch.long)])
        action, self.avg, self.count = self.avg[:, 0], self.avg[:, 1:], self.count[1:]
        return action.to(torch.float32)
