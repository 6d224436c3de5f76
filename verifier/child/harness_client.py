"""The execution child's side of a clocked bracket (verifier/execute/harness.py): a compute server, nothing more.

It asks the harness for a bracket, maps the pool the harness owns (verifier/common/ipc.py), queues its calls and says
so. It measures nothing and reports no number: whatever the candidate does to this module, its process or its
timers, the time and the outputs are read in the harness's process. Imports: torch, the standard library and the
verifier's child channel, pool and output listing (``inputs.as_list``: the outputs flattened as the harness lists the
reference's).
"""

from __future__ import annotations

import torch

from verifier.child.channel import Channel
from verifier.common import ipc
from verifier.common.inputs import as_list


class BracketClient:
    def __init__(self, channel: Channel, device: str, own_inputs=None):
        """``own_inputs()``: one call's inputs drawn in this process, for the values JSON cannot carry."""
        self.ch, self.device = channel, device
        self._own_inputs = own_inputs
        self._pools: dict[str, tuple] = {}
        self.seq = 0  # the harness's number of the last bracket served

    def _map(self, desc: dict):
        """The harness's pool: (uint8 tensor, its device address or 0)."""
        if "pool" not in self._pools:
            if desc.get("fd"):
                if not self.ch.fds:
                    raise RuntimeError("the harness's memory did not arrive")
                self._pools["pool"] = ipc.cuda_map(self.ch.fds.pop(0), int(desc["bytes"]))
            else:
                self._pools["pool"] = (ipc.cpu_map(desc["file"], int(desc["bytes"])), 0)
        return self._pools["pool"]

    def bracket(self, label: str, fn, host_waits: bool = False) -> str:
        """One bracket of ``fn`` (the model's forward, watched as the caller wants it): "done", or "enough"
        when the harness needs no more of ``label``. ``host_waits``: whether ``fn`` waits on the host: the harness
        then opens its gate without waiting for calls that are not queued."""
        reply = self.ch.ask({"op": "bracket", "label": label, "host_waits": bool(host_waits)})
        if reply.get("enough"):
            return "enough"
        pool, addr = self._map(reply["pool"])
        self.seq = int(reply["seq"])
        calls, stride, flags = int(reply["calls"]), int(reply["stride"]), int(reply["flags"])
        own = self._own_inputs() if any(e[0] == "child" for e in reply["inputs"]) and self._own_inputs else None
        sets = []
        values = reply.get("values") or [[None] * len(reply["inputs"]) for _ in range(calls)]
        for k in range(calls):
            base = flags + k * stride
            ins = [ipc.view(pool, base + e[1], *e[2:]) if e[0] == "t" else None for e in reply["inputs"]]
            outs = [(e[3], ipc.view(pool, base + e[0], e[1], e[2])) for e in reply["outputs"]]
            sets.append((ins, outs))
            # a tree input (a tuple of dims, a list of tensors: verifier/common/ipc.py), its tensors in the pool
            values[k] = [ipc.decode_value(v, lambda at, b=base: ipc.view(pool, b + at[0], *at[1:]))
                         if e[0] == "p" else v for e, v in zip(reply["inputs"], values[k])]
        if own is not None:
            values = [[own[j] if e[0] == "child" else v for j, (e, v) in enumerate(zip(reply["inputs"], vals))]
                      for vals in values]
        stream = torch.cuda.current_stream() if addr else None
        if stream is not None:  # the calls wait on the device for the harness's gate: queued now, run when it opens
            ipc.wait_value(stream, addr, int(reply["seq"]))
        else:
            self.ch.ask({"op": "armed"})  # returns when the harness has written the inputs and started its clock
        error = ""
        try:
            for (ins, outs), vals in zip(sets, values):
                args = [x if x is not None else v for x, v in zip(ins, vals)]
                got = fn(*args)
                got = as_list(got)
                if len(got) <= max(j for j, _ in outs):
                    raise RuntimeError(f"forward returned {len(got)} outputs, fewer than the task's")
                for o, buf in ((got[j], b) for j, b in outs):
                    if not isinstance(o, torch.Tensor) or o.shape != buf.shape or o.dtype != buf.dtype:
                        raise RuntimeError(f"forward returned {type(o).__name__} {tuple(getattr(o, 'shape', ()))} "
                                           f"{getattr(o, 'dtype', '')}, the task's output is {tuple(buf.shape)} "
                                           f"{buf.dtype}")
                    buf.copy_(o)
                del got
        except Exception as e:  # noqa: BLE001 - reported to the harness, which ends the bracket
            error = f"{type(e).__name__}: {str(e)[:300]}"
        finally:
            if stream is not None:
                ipc.write_value(stream, addr + 64, int(reply["seq"]))
        ack = self.ch.ask({"op": "queued" if stream is not None else "finished", "error": error})
        if error:
            raise RuntimeError(error)
        if not ack.get("ok"):
            raise RuntimeError("the harness ended the bracket")
        return "done"
