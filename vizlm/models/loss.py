"""The fused output loss every family's :class:`~vizlm.models.base.Readout` computes: the summed NLL of a
softmax output layer at the targets, chunk by chunk, its (N, V) logits never stored (docs/SCALING.md)."""

from __future__ import annotations

import torch

LOSS_CHUNK = 256  # rows of logits the fused loss computes at once: 256 x 10k words (10 MB) stay in the CPU cache
DEVICE_CHUNK_BYTES = 2**28  # on a GPU, chunks of up to 256 MB of logits: a 64 x 35 batch of 10k words is one chunk


def _host_checks(x: torch.Tensor) -> bool:
    """Whether the fused loss may look at values of ``x``'s device on the host (the CPU: free; a GPU
    would wait for its queue). Tests switch it off to run the device path on the CPU."""
    return x.device.type == "cpu"


class LinearNLL(torch.autograd.Function):
    """Summed NLL of ``softmax(x W^T + b)`` at ``targets`` (id 0 ignored), chunk by chunk.

    The (N, V) logits are never stored: each chunk of rows is multiplied out, turned into
    its NLL and, when gradients are wanted, at once into its gradient (softmax minus one-hot),
    which is multiplied back into the gradients of ``x``, ``W`` and ``b``. On the CPU that is
    2-3x faster than ``F.cross_entropy`` over stored logits (their 90 MB per batch of 64 x 35
    go through memory five times: product, log-softmax, its backward, the zero-filled NLL
    gradient, the products back) and equal to it up to float rounding (tests/test_models.py).

    The bias is one more column of ``W`` against a column of ones in ``x``: a chunk's logits are
    one product with nothing to broadcast first, and ``b``'s gradient comes out of ``W``'s. The
    weight gradient is accumulated transposed, (F, V), the layout in which MKL's product is
    fastest, and the two (chunk, V) buffers are allocated once (on a GPU a chunk is as large as
    :data:`DEVICE_CHUNK_BYTES` allows: fewer, larger kernels). Where the host may look at the
    values (:func:`_host_checks`), a chunk takes one softmax pass (the NLL is ``-log p`` of the
    target, or ``logsumexp - logit`` where ``p`` underflows) instead of a log-softmax and an
    exponential, and padding rows are zeroed only if there are any.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, targets):  # x (N, F), weight (V, F), bias (V,) or None, targets (N,)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        (N, F_), V = x.shape, weight.shape[0]
        if bias is not None:  # [x 1] [W b]^T = x W^T + b
            x1, w1 = torch.cat([x, x.new_ones(N, 1)], 1), torch.cat([weight, bias[:, None]], 1)  # (N, F+1), (V, F+1)
        else:
            x1, w1 = x, weight
        gx = torch.empty_like(x) if need_x else None
        gw1 = w1.new_zeros(w1.shape[1], V) if need_w or need_b else None  # (F[+1], V): [W b]'s gradient, transposed
        host = _host_checks(x)
        padded = not host or bool((targets == 0).any())
        chunk = LOSS_CHUNK if host else max(LOSS_CHUNK, DEVICE_CHUNK_BYTES // (V * x.element_size()))
        rows = min(chunk, N)
        logits, z = x.new_empty(rows, V), x.new_empty(rows, V)
        minus_one = x.new_full((rows, 1), -1.0)
        tiny = torch.finfo(x.dtype).tiny
        total = x.new_zeros((), dtype=torch.float64)
        for s in range(0, N, chunk):
            xc, tc = x1[s : s + chunk], targets[s : s + chunk, None]  # (n, F[+1]), (n, 1)
            n = tc.shape[0]
            lg = torch.mm(xc, w1.t(), out=logits[:n])  # (n, V)
            if host:
                zc = torch.softmax(lg, 1, out=z[:n])  # (n, V)
                p = zc.gather(1, tc)  # (n, 1)
                nll = -p.log()
                low = p[:, 0] < tiny  # underflow (a logit ~87 below the row's largest): exactly, from the logits
                if bool(low.any()):
                    nll[low] = torch.logsumexp(lg[low], 1, keepdim=True) - lg[low].gather(1, tc[low])
            else:
                zc = torch.log_softmax(lg, 1, out=z[:n])
                nll = -zc.gather(1, tc)
                zc.exp_()
            real = (tc != 0).to(zc.dtype) if padded else None  # (n, 1)
            total += (nll if real is None else nll * real).sum(dtype=torch.float64)
            if gx is None and gw1 is None:
                continue
            # d NLL / d logits = softmax - one-hot, on real rows only
            if real is None:
                zc.scatter_add_(1, tc, minus_one[:n])
            else:
                zc.mul_(real).scatter_add_(1, tc, -real)
            if gx is not None:
                torch.mm(zc, weight, out=gx[s : s + chunk])
            if gw1 is not None:
                gw1.addmm_(xc.t(), zc)
        gw = gw1[:F_].t().contiguous() if need_w else None
        gb = gw1[F_].clone() if need_b and bias is not None else None
        ctx.save_for_backward(gx, gw, gb)
        return total.to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        gx, gw, gb = ctx.saved_tensors
        return tuple(None if g is None else g * grad for g in (gx, gw, gb)) + (None,)


__all__ = ["DEVICE_CHUNK_BYTES", "LOSS_CHUNK", "LinearNLL"]
