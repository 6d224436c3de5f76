"""Red team of the static stage's reflection rules (verifier/front/static_tamper.py): reads of the candidate's own objects
(``**self.__dict__``, ``getattr(self.lstm, "weight_ih_l" + suffix)``, tests/test_verifier_static.py) are not patches;
writing through any namespace, setattr / delattr on what is imported, and PyTorch called by a name the scan reads or
cannot read still are."""

import pytest

from verifier import cheats
from verifier.front.static import scan


# the cheats the honest reads of tests/test_verifier_static.py resemble: each writes to what is not its own (or
# hides a submodule from nn.Module's registration), or calls PyTorch by a name
TAMPER = {
    "own_dict_write_hides_a_submodule": (cheats.C11, "self.__dict__['ref'] = nn.Linear(8, 8)\nreturn ext.relu(x)"),
    "own_dict_update": (cheats.C11, "self.__dict__.update(lin=nn.Linear(8, 8))\nreturn ext.relu(x)"),
    "own_dict_handed_on": (cheats.C11, "ns = self.__dict__\nns['ref'] = nn.Linear(8, 8)\nreturn ext.relu(x)"),
    "vars_of_functional_written": (cheats.C11, "vars(torch.nn.functional)['relu'] = ext.relu\nreturn ext.relu(x)"),
    "functional_dict_written": (cheats.C11, "torch.nn.functional.__dict__['relu'] = ext.relu\nreturn ext.relu(x)"),
    "setattr_torch_computed_name": (cheats.C11, "setattr(torch, 'mat' + 'mul', ext.relu)\nreturn ext.relu(x)"),
    "delattr_torch_constant_name": (cheats.C11, "delattr(torch.cuda, 'synchronize')\nreturn ext.relu(x)"),
    "setattr_through_type": (cheats.C11, "setattr(type(x), 'relu', ext.relu)\nreturn ext.relu(x)"),
    "alias_of_torch_assigned": (cheats.C11, "F2 = torch.nn.functional\nF2.relu = ext.relu\nreturn ext.relu(x)"),
    "getattr_torch_computed_called": (cheats.C01, "return getattr(torch, 'mat' + 'mul')(x, x)"),
    "getattr_torch_unreadable_called": (cheats.C01, "n = str(x.dim())\nreturn getattr(torch, 're' + n)(x)"),
    "functional_dict_item_called": (cheats.C01, "return torch.nn.functional.__dict__['relu'](x)"),
    "getattr_builds_a_dunder_on_own": (cheats.C15, "g = getattr(self.forward, '__glo' + 'bals__')\n"
                                                   "return ext.relu(x)"),
    "private_torch_by_name": (cheats.C11, "c = getattr(torch, '_' + 'C')\nreturn ext.relu(x)"),
}


@pytest.mark.parametrize("name", sorted(TAMPER))
def test_writes_through_namespaces_and_torch_called_by_name_are_still_caught(name):
    from bench.lib import fixtures as fx

    code_, forward = TAMPER[name]
    rep = scan(fx.cpu_candidate(forward))
    assert code_ in rep.cheat_codes, [str(f) for f in rep.findings]
    if code_ == cheats.C01:  # PyTorch compute, as `torch.matmul(x, x)` written out is
        assert any(f.torch for f in rep.findings if f.code == cheats.C01)
