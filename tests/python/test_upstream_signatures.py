"""The doubles the adapter tests use against the interfaces recorded from
the engines' upstream source (tests/python/upstream/*.json): a double that
leaves upstream behind fails here. The recorded lists name the upstream
commit they were taken from; signatures.py can take them again from a
newer checkout."""
import abc
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "upstream"))

import signatures  # noqa: E402
from doubles import _vllm_classes  # noqa: E402

_UPSTREAM = os.path.join(os.path.dirname(__file__), "upstream")


def recorded(engine):
    with open(os.path.join(_UPSTREAM, f"{engine}.json"), encoding="utf-8") as f:
        return json.load(f)


def test_the_vllm_double_has_the_signatures_of_vllm_upstream():
    upstream = recorded("vllm")
    names = list(upstream["signatures"])
    found = signatures.from_objects(_vllm_classes([]), names)
    assert signatures.differences(upstream["signatures"], found) == []


def test_a_double_that_leaves_upstream_behind_is_named():
    upstream = recorded("vllm")["signatures"]
    classes = _vllm_classes([])
    # The trainer engine as vLLM had it before a8f1d798: config first, and a
    # trainer_init that takes it.
    old = type("TrainerWeightTransferEngine", (abc.ABC,), {
        "__init__": lambda self, config, *, client, source, is_sender=True: None,
        "trainer_init": classmethod(lambda cls, config, init_info, *, client, source: None)})
    found = signatures.from_objects({"TrainerWeightTransferEngine": old}, ["TrainerWeightTransferEngine"])
    lines = signatures.differences({"TrainerWeightTransferEngine": upstream["TrainerWeightTransferEngine"]}, found)
    assert any(line.startswith("TrainerWeightTransferEngine.methods.__init__.params") for line in lines), lines
    assert any(line.startswith("TrainerWeightTransferEngine.methods.trainer_init") for line in lines), lines
    # A class variable, a keyword-only field and a method gone.
    @dataclasses.dataclass
    class TrainerInitInfo:
        rank: int = 0

    lines = signatures.differences({"TrainerInitInfo": upstream["TrainerInitInfo"]},
                                   signatures.from_objects({"TrainerInitInfo": TrainerInitInfo}, ["TrainerInitInfo"]))
    assert "TrainerInitInfo.class_vars: upstream [\"backend\"], here []" in lines
    assert "TrainerInitInfo.dataclass_fields: upstream [[\"rank\", true]], here [[\"rank\", false]]" in lines
    assert any(line.startswith("TrainerInitInfo.methods.__init_subclass__: missing") for line in lines)


def test_source_and_objects_give_one_list():
    text = '''
import abc, dataclasses
from typing import ClassVar
@dataclasses.dataclass(kw_only=True)
class Info(abc.ABC):
    backend: ClassVar[str] = "x"
    rank: int = 0
    name: str = ""
    @property
    def is_sender(self): ...
class Engine(abc.ABC):
    slots = 4
    def go(self, a, /, b=1, *rest, c, d=2, **more): ...
    @classmethod
    @abc.abstractmethod
    def make(cls, info, *, client, source=None): ...
    @staticmethod
    def helper(x): ...
def free(a, b=None): ...
'''
    namespace = {}
    exec(compile(text, "<signatures-test>", "exec"), namespace)  # noqa: S102 - our own text
    names = ["Info", "Engine", "free"]
    assert signatures.differences(signatures.from_source(text, names), signatures.from_objects(namespace, names)) == []
