"""The execution child's side of a clocked bracket (verifier/harness.py): a compute server, nothing more.

It asks the harness for a bracket, maps the pool the harness owns (verifier/ipc.py), queues its calls and says
so. It measures nothing and reports no number: whatever the candidate does to this module, its process or its
timers, the time and the outputs are read in the harness's process. Imports: torch and the standard library only.
"""

from __future__ import annotations

import torch

from verifier import ipc
from verifier.channel import Channel


class BracketClient:
    def __init__(self, channel: Channel, device: str):
        self.ch, self.device = channel, device
        self._pools: dict[str, tuple] = {}

    def _map(self, desc: dict):
        key = desc.get("ipc") or desc.get("file")
        if key not in self._pools:
            if "ipc" in desc:
                dev = torch.cuda.current_device()
                gate = torch.cuda.Event.from_ipc_handle(dev, bytes.fromhex(desc["gate"]))
                done = torch.cuda.Event.from_ipc_handle(dev, bytes.fromhex(desc["done"]))
                self._pools[key] = (ipc.cuda_map(desc["ipc"], int(desc["bytes"])), gate, done)
            else:
                self._pools[key] = (ipc.cpu_map(desc["file"], int(desc["bytes"])), None, None)
        return self._pools[key]

    def bracket(self, label: str, fn) -> str:
        """One bracket of ``fn`` (the model's forward, watched as the caller wants it): "done", or "enough"
        when the harness needs no more of ``label``."""
        reply = self.ch.ask({"op": "bracket", "label": label})
        if reply.get("enough"):
            return "enough"
        pool, gate, done = self._map(reply["pool"])
        calls, stride = int(reply["calls"]), int(reply["stride"])
        sets = []
        for k in range(calls):
            base = k * stride
            ins = [ipc.view(pool, base + e[1], e[2], e[3]) if e[0] == "t" else None for e in reply["inputs"]]
            outs = [ipc.view(pool, base + e[0], e[1], e[2]) for e in reply["outputs"]]
            sets.append((ins, outs))
        go = self.ch.ask({"op": "armed"})
        values = go.get("values") or [[] for _ in range(calls)]
        error = ""
        try:
            if gate is not None:
                torch.cuda.current_stream().wait_event(gate)
            for (ins, outs), vals in zip(sets, values):
                args = [x if x is not None else v for x, v in zip(ins, vals)]
                got = fn(*args)
                got = list(got) if isinstance(got, (list, tuple)) else [got]
                if len(got) != len(outs):
                    raise RuntimeError(f"forward returned {len(got)} outputs, the task has {len(outs)}")
                for o, buf in zip(got, outs):
                    if not isinstance(o, torch.Tensor) or o.shape != buf.shape or o.dtype != buf.dtype:
                        raise RuntimeError(f"forward returned {type(o).__name__} {tuple(getattr(o, 'shape', ()))} "
                                           f"{getattr(o, 'dtype', '')}, the task's output is {tuple(buf.shape)} "
                                           f"{buf.dtype}")
                    buf.copy_(o)
                del got
        except Exception as e:  # noqa: BLE001 - reported to the harness, which ends the bracket
            error = f"{type(e).__name__}: {str(e)[:300]}"
        finally:
            if done is not None:
                done.record(torch.cuda.current_stream())
        ack = self.ch.ask({"op": "finished", "error": error})
        if error:
            raise RuntimeError(error)
        if not ack.get("ok"):
            raise RuntimeError("the harness ended the bracket")
        return "done"
