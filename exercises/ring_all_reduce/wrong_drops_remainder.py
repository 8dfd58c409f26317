"""Wrong on purpose: chunks of numel // W elements, so the last numel % W elements are never summed."""

import torch
import torch.distributed as dist


def _exchange(send_buf, recv_buf, right, left):
    # post both, then wait: no deadlock. Sender and receiver agree on every chunk's size, so both
    # skip an empty chunk (a rank may send a full chunk and receive an empty one in the same step)
    reqs = []
    if send_buf.numel():
        reqs.append(dist.isend(send_buf, right))
    if recv_buf.numel():
        reqs.append(dist.irecv(recv_buf, left))
    for r in reqs:
        r.wait()


def ring_all_reduce(tensor):
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:
        return tensor
    size = tensor.numel() // world
    chunks = [tensor.view(-1)[i * size:(i + 1) * size] for i in range(world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    # reduce-scatter: after W-1 steps, chunk (rank + 1) % W on this rank holds the full sum
    for step in range(world - 1):
        send_i, recv_i = (rank - step) % world, (rank - step - 1) % world
        incoming = torch.empty_like(chunks[recv_i])
        _exchange(chunks[send_i], incoming, right, left)
        chunks[recv_i] += incoming
    # all-gather: pass the finished chunks around the ring, W-1 more steps
    for step in range(world - 1):
        send_i, recv_i = (rank + 1 - step) % world, (rank - step) % world
        incoming = torch.empty_like(chunks[recv_i])
        _exchange(chunks[send_i], incoming, right, left)
        chunks[recv_i].copy_(incoming)
    return tensor
