"""RopeRotator against a from-scratch RoPE, for neox and interleaved pairing and partial rotary."""

from __future__ import annotations

import math

import pytest
import torch

from gpu_runtime.rope import RopeRotator

pytestmark = pytest.mark.unit


def table(max_pos: int, rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def reference(x: torch.Tensor, pos: torch.Tensor, rotary_dim: int, neox: bool) -> torch.Tensor:
    out = x.clone().double()
    half = rotary_dim // 2
    for i, p in enumerate(pos.tolist()):
        for j in range(half):
            theta = p / 10000.0 ** (2 * j / rotary_dim)
            a, b = (j, j + half) if neox else (2 * j, 2 * j + 1)
            x1, x2 = x[i, :, a].double(), x[i, :, b].double()
            out[i, :, a] = x1 * math.cos(theta) - x2 * math.sin(theta)
            out[i, :, b] = x2 * math.cos(theta) + x1 * math.sin(theta)
    return out.float()


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_rotate_matches_reference_and_inverts(neox: bool, rotary_dim: int) -> None:
    torch.manual_seed(0)
    rot = RopeRotator(
        table(64, rotary_dim), head_size=16, rotary_dim=rotary_dim, is_neox_style=neox
    )
    keys = torch.randn(5, 2, 16)
    pos = torch.tensor([0, 3, 17, 40, 63])
    rotated = rot.rotate(keys, pos)
    torch.testing.assert_close(
        rotated, reference(keys, pos, rotary_dim, neox), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(rot.unrotate(rotated, pos), keys, rtol=1e-5, atol=1e-5)
    assert torch.equal(rotated[..., rotary_dim:], keys[..., rotary_dim:])  # partial rotary


def test_moving_keys_is_relative() -> None:
    """R(p1) R(p0)^-1 k depends only on p1 - p0 through the attention score with a query."""
    torch.manual_seed(1)
    rot = RopeRotator(table(128, 16), head_size=16, rotary_dim=16, is_neox_style=True)
    k, q = torch.randn(1, 1, 16), torch.randn(1, 1, 16)
    score = [
        (rot.rotate(q, torch.tensor([p + 9])) * rot.rotate(k, torch.tensor([p]))).sum()
        for p in (0, 30, 100)
    ]
    torch.testing.assert_close(score[0], score[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(score[0], score[2], rtol=1e-5, atol=1e-5)


def test_rejects_bad_shapes_and_positions() -> None:
    rot = RopeRotator(table(8, 16), head_size=16, rotary_dim=16, is_neox_style=True)
    with pytest.raises(ValueError):
        rot.rotate(torch.zeros(2, 16), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="beyond"):
        rot.rotate(torch.zeros(1, 1, 16), torch.tensor([8]))


@pytest.mark.parametrize("neox", [True, False])
def test_move_is_one_rotation_by_the_position_change(neox: bool) -> None:
    torch.manual_seed(2)
    rot = RopeRotator(table(256, 16), head_size=16, rotary_dim=16, is_neox_style=neox)
    assert rot.composes
    keys = torch.randn(6, 2, 16)
    source = torch.tensor([10, 10, 40, 200, 7, 0])
    target = torch.tensor([30, 10, 5, 100, 7, 255])
    placed = rot.rotate(keys, source)
    moved = rot.move(placed, source, target)
    torch.testing.assert_close(moved, rot.rotate(keys, target), rtol=1e-5, atol=1e-5)
    assert torch.equal(moved[1], placed[1]) and torch.equal(moved[4], placed[4])  # exact when put


def test_scaled_tables_move_through_pre_rope_form() -> None:
    scaled = table(64, 16) * 1.2  # a YaRN-like magnitude factor
    rot = RopeRotator(scaled, head_size=16, rotary_dim=16, is_neox_style=True)
    assert not rot.composes
    keys = torch.randn(3, 1, 16)
    src, dst = torch.tensor([1, 2, 3]), torch.tensor([9, 8, 7])
    torch.testing.assert_close(
        rot.move(keys, src, dst), rot.rotate(rot.unrotate(keys, src), dst), rtol=1e-6, atol=1e-6
    )


def textbook(
    x: torch.Tensor, cos_sin: torch.Tensor, pos: torch.Tensor, rotary_dim: int, neox: bool
) -> torch.Tensor:
    """float32 RoPE in its usual form (what the rotator computed before it wrote into one
    buffer): ``x1 cos - x2 sin`` and ``x2 cos + x1 sin``, concatenated."""
    cos, sin = cos_sin[pos].chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return torch.cat((out, rest), dim=-1)


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_rotations_are_the_textbook_form_bit_for_bit(neox: bool, rotary_dim: int) -> None:
    """The stored facts' keys and the exactness tests rest on these bits: rotating, undoing and
    moving (forwards and backwards in one call) give exactly the textbook float32 operations."""
    torch.manual_seed(3)
    cos_sin = table(512, rotary_dim)
    rot = RopeRotator(cos_sin, head_size=16, rotary_dim=rotary_dim, is_neox_style=neox)
    keys = torch.randn(40, 3, 16)
    source = torch.randint(0, 256, (40,))
    target = torch.randint(0, 512, (40,))
    target[:5] = source[:5]  # some stay put
    backwards = cos_sin.clone()
    backwards[:, rotary_dim // 2 :] = -backwards[:, rotary_dim // 2 :]  # R(-p): opposite sin

    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.view(torch.int32)

    assert torch.equal(
        bits(rot.rotate(keys, target)), bits(textbook(keys, cos_sin, target, rotary_dim, neox))
    )
    assert torch.equal(
        bits(rot.unrotate(keys, source)), bits(textbook(keys, backwards, source, rotary_dim, neox))
    )
    delta = target - source
    ahead = textbook(keys, cos_sin, delta.abs(), rotary_dim, neox)
    behind = textbook(keys, backwards, delta.abs(), rotary_dim, neox)
    expected = torch.where((delta >= 0)[:, None, None], ahead, behind)
    assert (delta < 0).any() and (delta > 0).any()
    assert torch.equal(bits(rot.move(keys, source, target)), bits(expected))
    assert torch.equal(rot.move(keys, source, target)[:5], keys[:5])  # R(0) is the identity
