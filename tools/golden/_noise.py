"""Shared by the golden tools whose reference draws its initial noise inside the model
(`torch.randn(size=(B, horizon, action_dim), ...)`: GR00T N1.5's and N1.7's action heads;
`torch.rand(B, chunk * max_action_dim, ...)` with positional sizes: Evo-1's flow-matching head)."""

import contextlib

import torch


@contextlib.contextmanager
def explicit_noise(noise):
    """Within the block, `torch.randn(size=noise.shape, ...)` returns `noise` (in the asked dtype)
    instead of drawing; every other call draws as usual. Yields the list of replaced calls."""
    real, calls = torch.randn, []

    def randn(*args, **kw):
        if tuple(kw.get("size", ())) == tuple(noise.shape) and not args:
            calls.append(1)
            return noise.clone().to(kw.get("dtype") or noise.dtype)
        return real(*args, **kw)

    torch.randn = randn
    try:
        yield calls
    finally:
        torch.randn = real


@contextlib.contextmanager
def explicit_rand(u):
    """Within the block, `torch.rand(*u.shape, ...)` (positional sizes, no `size=`) returns `u` (in
    the asked dtype) instead of drawing uniform [0, 1) values; every other call draws as usual.
    Yields the list of replaced calls."""
    real, calls = torch.rand, []

    def rand(*args, **kw):
        if tuple(args) == tuple(u.shape) and "size" not in kw:
            calls.append(1)
            return u.clone().to(kw.get("dtype") or u.dtype)
        return real(*args, **kw)

    torch.rand = rand
    try:
        yield calls
    finally:
        torch.rand = real
