"""TracedModule graph surgery, written as MegEngine's traced_module guide writes it ("图手术"), with
``import compiler as megengine``. Each edit is checked against an eager model that computes the
intended result (and one against PyTorch); the edited module then saves to a ``.tm``, loads back
under the default restricted loader, dumps to ``.mge`` through ``jit.trace`` and runs in lite."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest
import torch

import compiler as megengine
import compiler.functional as F
import compiler.module as M
import compiler.traced_module as tm
from compiler.lite import Network
from compiler.traced_module.expr import CallMethod, GetAttr, Input
from compiler.traced_module.node import ModuleNode, TensorNode
from tests.conftest import data_path

RNG_SEED = 7


class Block(M.Module):
    """conv -> bn -> (+ skip) -> activation: a user module, traced into a nested TracedModule."""

    def __init__(self, channels: int, act: str) -> None:
        super().__init__()
        self.conv = M.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(channels)
        self.act = act

    def forward(self, x: megengine.Tensor) -> megengine.Tensor:
        return getattr(F, self.act)(self.bn(self.conv(x)) + x)


class Net(M.Module):
    def __init__(self, act: str = "relu") -> None:
        super().__init__()
        self.stem = M.Conv2d(3, 8, 3, padding=1)
        self.block = Block(8, act)
        self.head = M.Linear(8, 5)
        self.act = act

    def forward(self, x: megengine.Tensor) -> megengine.Tensor:
        x = getattr(F, self.act)(self.stem(x))
        x = self.block(x)
        x = F.flatten(F.avg_pool2d(x, 8), 1)
        return self.head(x)


def _randomized(net: M.Module) -> M.Module:
    rng = np.random.default_rng(RNG_SEED)
    state = {}
    for key, value in net.state_dict().items():
        sample = rng.standard_normal(value.shape).astype(np.float32) * 0.5
        state[key] = np.abs(sample) + 0.5 if key.endswith("running_var") else sample
    net.load_state_dict(state)
    return net.eval()


def _input(shape: tuple[int, ...] = (2, 3, 8, 8), seed: int = 1) -> megengine.Tensor:
    return megengine.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _twin(act: str) -> tuple[Net, Net]:
    """The model, and an eager model of the intended result sharing its weights."""
    net = _randomized(Net())
    reference = Net(act)
    reference.load_state_dict(net.state_dict())
    return net, reference.eval()


def _close(got: megengine.Tensor, want: Any, atol: float = 1e-5) -> None:
    want = want.numpy() if hasattr(want, "numpy") else np.asarray(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=atol)


def _save_load_dump_run(traced: tm.TracedModule, x: megengine.Tensor, want: np.ndarray) -> None:
    """.tm after surgery: save -> safe load -> jit.trace dump -> lite Network, same numbers."""
    buf = io.BytesIO()
    megengine.save(traced, buf)
    buf.seek(0)
    loaded = megengine.load(buf)  # the default restricted unpickler
    traced.graph._reset_ids()  # loading numbers expressions afresh, as MegEngine does
    assert type(loaded) is tm.TracedModule and str(loaded) == str(traced)
    np.testing.assert_allclose(loaded(x).numpy(), want, rtol=1e-5, atol=1e-5)

    @megengine.jit.trace(symbolic=True, capture_as_const=True)
    def infer(data: megengine.Tensor, *, model: M.Module) -> megengine.Tensor:
        return model(data)

    infer(x, model=loaded)
    mge = io.BytesIO()
    infer.dump(mge, arg_names=["data"])
    (out,) = Network(mge.getvalue())(data=x.numpy()).values()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# finding expressions and nodes


def test_graph_prints_and_filters_find_what_megengine_finds() -> None:
    net = _randomized(Net())
    traced = tm.trace_module(net, _input())
    graph = traced.graph
    text = str(graph)
    assert text.splitlines()[0] == "Net.Graph (self, x) {"
    assert '\t%2:\tstem = getattr(self, "stem") -> (Conv2d)' in text
    assert "\t%3:\tstem_out = stem(x, )" in text
    assert "\t%4:\trelu_out = elemwise.relu(stem_out, )" in text
    assert "block_out = block(relu_out, )" in text and text.endswith("\treturn head_out\n}")
    assert f"{graph:i}".splitlines()[0] == "Net.Graph (%0_self, %1_x) {"

    # recursive (default) searches reach into the Block graph; ids are unique across graphs
    relus = graph.get_function_by_type(F.relu).as_list()
    assert len(relus) == 2 and len(graph.get_function_by_type(F.relu, recursive=False)) == 1
    assert {e.top_graph for e in relus} == {graph, traced.block.graph}
    ids = [e.id for e in graph.exprs()]
    assert len(ids) == len(set(ids))
    assert graph.get_expr_by_id(relus[1].id).as_unique() is relus[1]
    assert graph.exprs().call_function(F.relu).as_count() == 2
    assert list(graph.exprs().call_function(F.relu).as_dict()) == [e.id for e in relus]

    add = graph.get_method_by_type("__add__").as_unique()
    assert isinstance(add, CallMethod) and add.top_graph is traced.block.graph
    convs = graph.get_module_by_type(M.Conv2d).as_list()
    assert [n.name for n in convs] == ["stem", "conv"]
    assert all(isinstance(n, ModuleNode) and n.module_type is M.Conv2d for n in convs)
    assert convs[0].owner is net.stem and convs[1].owner is net.block.conv
    assert graph.exprs().call_module(M.Conv2d).as_count() == 2
    assert len(graph.get_method_by_type("__call__", recursive=False)) == 3  # stem, block, head
    block_call = graph.exprs(recursive=False).call_module().as_list()[1]
    assert block_call.graph is traced.block.graph and convs[0].users[0].graph is None
    assert graph.get_node_by_name("Net_stem").as_unique() is convs[0]
    assert graph.get_node_by_name("net_STEM*").as_count() == 2  # glob, case-insensitive by default
    assert graph.get_node_by_id(convs[1].id).as_unique() is convs[1]
    assert graph.nodes().type(TensorNode).as_count() + graph.nodes().type(ModuleNode).as_count() == len(
        graph.nodes()
    )

    # expression arguments, users and producers (MegEngine's Expr.args / kwargs / named_args)
    pool = graph.get_function_by_type(F.avg_pool2d).as_unique()
    assert pool.args[0] is graph.get_node_by_name("Net_block_out").as_unique()
    assert pool.args[1] == 8 and pool.named_args["kernel_size"] == 8
    assert add.args[0].expr.inputs[0].name == "bn" and add.args[1] is traced.block.graph.inputs[1]
    head_call = graph.get_module_by_type(M.Linear).as_unique().users[0]
    assert head_call.outputs == graph.outputs and head_call.inputs[1].expr.func_key[1] == "flatten"
    assert tm.is_call_module(head_call, M.Linear) and not tm.is_call_function(head_call)
    assert tm.is_call_tensor_method(add, "__add__") and tm.is_input(graph.inputs[1].expr)
    assert all(isinstance(e, Input) for e in graph.exprs(recursive=False).as_list()[:2])


# ----------------------------------------------------------------------------------------------
# the guide's edits


def test_replace_every_relu_with_relu6() -> None:
    net, reference = _twin("relu6")
    x = _input() * 4.0  # large enough that relu6 clips
    traced = tm.trace_module(net, x)
    for expr in traced.graph.get_function_by_type(F.relu).as_list():
        cur_graph = expr.top_graph
        relu_inp_node = expr.inputs[0]
        relu_out_node = expr.outputs[0]
        with cur_graph.insert_exprs():
            relu6_out_node = F.relu6(relu_inp_node)
        cur_graph.replace_node({relu_out_node: relu6_out_node})
        cur_graph.compile()
    assert traced.graph.get_function_by_type(F.relu).as_list() == []
    assert traced.graph.get_function_by_type(F.relu6).as_count() == 2
    assert "relu6_out = elemwise.relu6(stem_out, )" in str(traced.graph)
    want = reference(x)
    assert np.abs(want.numpy() - net(x).numpy()).max() > 1e-3  # the edit changes the numbers
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())


def _torch_reference(net: Net, x: np.ndarray, after_stem: Any) -> np.ndarray:
    """Net's forward in PyTorch with ``after_stem`` applied to the stem convolution's output."""
    s = {k: torch.from_numpy(np.asarray(v)) for k, v in net.state_dict().items()}
    t = torch.from_numpy(x)
    h = torch.relu(
        after_stem(torch.nn.functional.conv2d(t, s["stem.weight"], s["stem.bias"].reshape(-1), padding=1))
    )
    b = torch.nn.functional.conv2d(h, s["block.conv.weight"], padding=1)
    b = torch.nn.functional.batch_norm(
        b,
        s["block.bn.running_mean"],
        s["block.bn.running_var"],
        s["block.bn.weight"],
        s["block.bn.bias"],
        eps=1e-5,
    )
    h = torch.relu(b + h)
    h = torch.nn.functional.avg_pool2d(h, 8).flatten(1)
    return (h @ s["head.weight"].T + s["head.bias"]).numpy()


def test_insert_an_op_after_a_conv_matches_torch() -> None:
    net = _randomized(Net())
    x = _input()
    traced = tm.trace_module(net, x)
    graph = traced.graph
    conv_expr = graph.get_module_by_type(M.Conv2d, recursive=False).as_unique().users[0]
    conv_out = conv_expr.outputs[0]
    with graph.insert_exprs(conv_expr):
        scaled = F.sigmoid(conv_out) * 2.0 - 0.5
    graph.replace_node({conv_out: scaled})
    graph.compile()
    text = str(graph)
    assert "sigmoid_out = elemwise.sigmoid(stem_out, )" in text
    assert "relu_out = elemwise.relu(sub_out, )" in text
    exprs = graph.exprs(recursive=False).as_list()
    assert exprs.index(conv_expr) + 1 == exprs.index(scaled.expr.inputs[0].expr.inputs[0].expr)
    want = _torch_reference(net, x.numpy(), lambda t: torch.sigmoid(t) * 2.0 - 0.5)
    _close(traced(x), want, atol=1e-4)
    _save_load_dump_run(traced, x, traced(x).numpy())


def _fold_bn(conv: M.Conv2d, bn: M.BatchNorm2d) -> M.Conv2d:
    std = np.sqrt(bn.running_var.numpy().reshape(-1) + bn.eps)
    scale = bn.weight.numpy().reshape(-1) / std
    fused = M.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding)
    fused.weight = megengine.Parameter(conv.weight.numpy() * scale.reshape(-1, 1, 1, 1))
    bias = bn.bias.numpy().reshape(-1) - bn.running_mean.numpy().reshape(-1) * scale
    fused.bias = megengine.Parameter(bias.reshape(1, -1, 1, 1).astype(np.float32))
    return fused.eval()


def test_replace_a_submodule_conv_bn_fusion_as_in_the_guide() -> None:
    net = _randomized(Net())
    x = _input()
    want = net(x)
    traced = tm.trace_module(net, x)
    graph = traced.graph
    fused = 0
    for conv_node in graph.get_module_by_type(M.Conv2d).as_list():
        conv_expr = conv_node.users[0]
        conv_out_node = conv_expr.outputs[0]
        if len(conv_out_node.users) != 1:
            continue
        bn_expr = conv_out_node.users[0]
        bn_node = bn_expr.inputs[0]
        if not isinstance(bn_node, ModuleNode) or bn_node.module_type != M.BatchNorm2d:
            continue
        cur_graph = conv_node.top_graph
        self_node = cur_graph.inputs[0]
        self_module = self_node.owner
        self_module.fused_conv = _fold_bn(conv_node.owner, bn_node.owner)
        inp_node = conv_expr.inputs[1]
        bn_out_node = bn_expr.outputs[0]
        with cur_graph.insert_exprs():
            fused_out = self_node.fused_conv(inp_node)
        cur_graph.replace_node({bn_out_node: fused_out})
        cur_graph.compile()
        fused += 1
    assert fused == 1
    block_graph = traced.block.graph
    assert block_graph.get_module_by_type(M.BatchNorm2d).as_list() == []
    assert 'fused_conv = getattr(self, "fused_conv") -> (Conv2d)' in str(block_graph)
    assert "add_out = fused_conv_out.__add__(x, )" in str(block_graph)
    _close(traced(x), want, atol=1e-4)
    assert "block.fused_conv.weight" in traced.state_dict()
    _save_load_dump_run(traced, x, traced(x).numpy())


class Scale(M.Module):
    """A user module inserted by surgery: traced into a TracedModule of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = megengine.Parameter(np.array([1.5], np.float32))
        self.act = M.Sigmoid()

    def forward(self, x: megengine.Tensor) -> megengine.Tensor:
        return self.act(x) * self.gain + 1


def test_insert_a_user_module_and_rename_nodes() -> None:
    net = _randomized(Net())
    x = _input()
    traced = tm.trace_module(net, x)
    traced.scale = Scale()
    graph = traced.graph
    self_node = graph.inputs[0]
    out_node = graph.outputs[0]
    with graph.insert_exprs():
        scaled = self_node.scale(out_node)
        scaled.name = "scaled_logits"
    graph.replace_node({out_node: scaled})
    graph.compile()
    assert isinstance(traced.scale, tm.TracedModule) and traced.scale.graph.top_graph is graph
    assert str(traced.scale.graph) == (
        "Net.scale.Graph (self, x) {\n"
        f'\t%{traced.scale.graph.exprs(False).as_list()[2].id}:\tact = getattr(self, "act") -> (Sigmoid)\n'
        + "".join(f"\t{e!r}\n" for e in traced.scale.graph.exprs(False).as_list()[3:])
        + "\treturn add_out\n}"
    )
    assert "scaled_logits = scale(head_out, )" in str(graph) and graph.outputs[0].name == "scaled_logits"
    with pytest.raises(tm.TracedModuleError, match="already used"):
        graph.outputs[0].name = "head_out"
    want = F.sigmoid(net(x)) * 1.5 + 1
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())


def test_delete_exprs_and_fold_constants_into_the_conv() -> None:
    class Anchor(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(3, 4, 1, bias=True)

        def forward(self, x: megengine.Tensor) -> megengine.Tensor:
            x = self.conv(x)
            x = x * 8
            return x / 128

    net = _randomized(Anchor())
    x = _input()
    want = net(x)
    traced = tm.trace_module(net, x)
    graph = traced.graph
    for div_expr in graph.get_method_by_type("__truediv__").as_list():  # the guide's fuse_const
        div_self, div_inp = div_expr.args
        if isinstance(div_inp, TensorNode):
            continue
        mul_expr = div_self.expr
        mul_self, mul_inp = mul_expr.args
        call_conv_expr = mul_self.expr
        conv_module = call_conv_expr.inputs[0].owner
        conv_module.weight = conv_module.weight * mul_inp / div_inp
        conv_module.bias = conv_module.bias * mul_inp / div_inp
        call_conv_expr.top_graph.replace_node({div_expr.outputs[0]: call_conv_expr.outputs[0]})
        call_conv_expr.top_graph.compile()
    assert [type(e) for e in graph.exprs(recursive=False).as_list()[2:]] == [GetAttr, CallMethod]
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())

    # delete every relu: its users read its input instead; then clear the whole graph
    net2 = _randomized(Net())
    traced2 = tm.trace_module(net2, x)
    for expr in traced2.graph.get_function_by_type(F.relu).as_list():
        expr.top_graph.replace_node({expr.outputs[0]: expr.inputs[0]})
        expr.top_graph.compile()
    h = net2.stem(x)
    h = net2.block.bn(net2.block.conv(h)) + h
    _close(traced2(x), net2.head(F.flatten(F.avg_pool2d(h, 8), 1)))
    graph2 = traced2.graph
    graph2.replace_node({graph2.outputs[0]: graph2.inputs[1]})
    graph2.compile()
    assert graph2._exprs == [] and str(graph2) == "Net.Graph (self, x) {\n\treturn x\n}"
    np.testing.assert_array_equal(traced2(x).numpy(), x.numpy())


# ----------------------------------------------------------------------------------------------
# cutting, watching and changing the graph's inputs and outputs


def test_cut_the_graph_with_end_points_and_watch_points() -> None:
    net = _randomized(Net())
    x = _input()
    traced = tm.trace_module(net, x)
    graph = traced.graph
    stem_out = graph.get_node_by_name("Net_stem_out").as_unique()
    block_out = graph.get_node_by_name("Net_block_out").as_unique()
    inner_add = traced.block.graph.get_method_by_type("__add__").as_unique().outputs[0]
    traced.set_watch_points([stem_out, inner_add])
    full = traced(x)
    _close(traced.watch_node_value[stem_out], net.stem(x))
    _close(
        traced.watch_node_value[inner_add],
        net.block.bn(net.block.conv(F.relu(net.stem(x)))) + F.relu(net.stem(x)),
    )
    traced.clear_watch_points()
    assert traced.watch_node_value == {}

    traced.set_end_points([stem_out, block_out])
    cut = traced(x)
    assert isinstance(cut, list) and len(cut) == 2
    _close(cut[0], net.stem(x))
    _close(cut[1], net.block(F.relu(net.stem(x))))
    with pytest.raises(tm.TracedModuleError, match="not a node of the top graph"):
        traced.set_end_points(inner_add)
    traced.clear_end_points()
    np.testing.assert_array_equal(traced(x).numpy(), full.numpy())

    # graph.eval runs the graph on tensors for inputs[1:], outputs as a flat list
    (evaluated,) = graph.eval(x)
    np.testing.assert_array_equal(evaluated.numpy(), full.numpy())
    with pytest.raises(tm.TracedModuleError, match="takes 1 inputs"):
        graph.eval(x, x)

    # cut for good: the intermediate node becomes the output; the rest is dropped
    graph.reset_outputs(block_out)
    graph.compile()
    assert graph.get_module_by_type(M.Linear, recursive=False).as_list() == []
    want = net.block(F.relu(net.stem(x)))
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())


def test_add_and_remove_inputs_and_outputs() -> None:
    net = _randomized(Net())
    x = _input()
    y = net(x)
    traced = tm.trace_module(net, x)
    graph = traced.graph
    data = graph.add_input_node(shape=(2, 5), name="data")
    assert data.name == "data" and graph.inputs[-1] is data and len(graph.inputs) == 3
    assert str(graph).startswith("Net.Graph (self, x, data) {")
    with graph.insert_exprs():
        summed = graph.outputs[0] + data
    graph.add_output_node(summed)
    bias = _input((2, 5), seed=3)
    out, total = traced(x, bias)
    _close(out, y)
    _close(total, y + bias)
    graph.reset_outputs({"logits": graph.outputs[0], "sum": summed})
    result = traced(x, bias)
    assert set(result) == {"logits", "sum"}
    _close(result["sum"], y + bias)
    with pytest.raises(tm.TracedModuleError, match="still used"):
        graph.remove_input(data)
    graph.reset_outputs(graph.outputs[0])
    graph.compile()
    graph.remove_input(data)
    assert [n.name for n in graph.inputs] == ["self", "x"]
    _close(traced(x), y)
    with pytest.raises(tm.TracedModuleError, match="only works on the top graph"):
        traced.block.graph.add_input_node((1,))


# ----------------------------------------------------------------------------------------------
# flatten


def test_flatten_inlines_sub_graphs() -> None:
    net = _randomized(Net())
    x = _input()
    traced = tm.trace_module(net, x)
    flat = traced.flatten()
    graph = flat.graph
    assert graph.get_method_by_type("__call__").as_count() == 4  # stem, conv, bn, head: no block
    assert [n.owner for n in graph.get_module_by_type(M.Module) if n is not graph.inputs[0]] == [
        flat.stem,
        flat.block.conv,
        flat.block.bn,
        flat.head,
    ]
    assert 'block_conv = getattr(self, "block.conv") -> (Conv2d)' in str(graph)
    names = [n.name for n in graph.nodes()]
    assert len(names) == len(set(names))
    assert [e.id for e in graph.exprs()] == list(range(len(graph.exprs())))
    np.testing.assert_array_equal(flat(x).numpy(), traced(x).numpy())
    np.testing.assert_array_equal(flat.flatten()(x).numpy(), traced(x).numpy())
    # a copy: editing the flat module leaves the original alone
    flat.head.weight = flat.head.weight * 0
    np.testing.assert_array_equal(traced(x).numpy(), net(x).numpy())
    _save_load_dump_run(traced.flatten(), x, net(x).numpy())


# ----------------------------------------------------------------------------------------------
# errors


def test_surgery_errors_name_the_problem_and_leave_the_graph_alone() -> None:
    net = _randomized(Net())
    x = _input()
    traced = tm.trace_module(net, x)
    graph = traced.graph
    before = str(traced)
    stem_out = graph.get_node_by_name("Net_stem_out").as_unique()
    with pytest.raises(tm.TracedModuleError, match="only available inside graph.insert_exprs"):
        stem_out + 1
    with pytest.raises(TypeError, match="callable only inside graph.insert_exprs"):
        graph.inputs[0](x)
    inner = traced.block.graph.inputs[1]
    with pytest.raises(tm.TracedModuleError, match="belongs to Net.block"):
        with graph.insert_exprs():
            F.relu(inner)
    with pytest.raises(ValueError):
        with graph.insert_exprs():
            F.neg(stem_out)
            F.reshape(stem_out, (7, 7))  # wrong element count: the whole block is dropped
    assert str(traced) == before
    assert [e for e in stem_out.users if e.top_graph is None or e not in graph._exprs] == []
    with pytest.raises(tm.TracedModuleError, match="a TensorNode but"):
        graph.replace_node({stem_out: graph.inputs[0]})
    with pytest.raises(tm.TracedModuleError, match="is not an expression of"):
        graph.insert_exprs(traced.block.graph.exprs(False).as_list()[-1])
    # the traced module still runs as before, and tracing again works after surgery blocks
    np.testing.assert_array_equal(traced(x).numpy(), net(x).numpy())
    assert str(tm.trace_module(traced, x)) == before


# ----------------------------------------------------------------------------------------------
# editing loaded modules: a pickled xmge TracedModule, and MegEngine's own .tm


def test_surgery_after_a_pickle_round_trip_and_replace_inputs() -> None:
    net = _randomized(Net())
    x = _input()
    traced = pickle.loads(pickle.dumps(tm.trace_module(net, x)))  # as the guide does before editing
    linear_node = traced.graph.get_module_by_type(M.Linear).as_unique()
    linear_call = linear_node.users[0]
    inp_node = linear_call.inputs[1]
    with linear_call.top_graph.insert_exprs():
        halved = inp_node * 0.5
    linear_call.replace_inputs({inp_node: halved})
    assert "head_out = head(mul_out, )" in str(traced.graph)
    with pytest.raises(tm.TracedModuleError, match="must be made before"):
        inp_node.expr.replace_inputs({inp_node.expr.inputs[0]: halved})
    h = F.relu(net.stem(x))
    h = F.relu(net.block.bn(net.block.conv(h)) + h)
    want = net.head(F.flatten(F.avg_pool2d(h, 8), 1) * 0.5)
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())


def test_surgery_on_megengine_convnet_tm() -> None:
    traced = tm.load_megengine_tm(data_path("convnet", "convnet.tm"))
    x = megengine.tensor(np.load(data_path("convnet", "inputs.npz"))["data"])
    graph = traced.graph
    relu_call = graph.exprs().call_module(M.ReLU).as_unique()
    relu_out = relu_call.outputs[0]
    with graph.insert_exprs():
        relu6_out = F.relu6(relu_call.inputs[1])
    graph.replace_node({relu_out: relu6_out})
    graph.compile()
    assert graph.get_module_by_type(M.ReLU).as_list() == []
    ids = [e.id for e in graph.exprs()]
    assert len(ids) == len(set(ids))  # new ids continue past the file's
    h = traced.pool2(traced.conv2(traced.pool1(traced.conv1(x))))
    want = traced.fc2(F.relu6(traced.fc1(F.flatten(h, 1))))
    _close(traced(x), want)
    _save_load_dump_run(traced, x, want.numpy())
    # and cut it after the first pooling
    traced.set_end_points(graph.get_node_by_name("ConvNet_pool1_out").as_unique())
    (cut,) = traced(x)
    _close(cut, traced.pool1(traced.conv1(x)))


class Leaky(M.Module):
    def forward(self, x: megengine.Tensor) -> megengine.Tensor:
        y = F.leaky_relu(x, negative_slope=0.1)
        return F.sigmoid(x) + y * 2


def test_set_arg_changes_a_call_in_place() -> None:
    x = _input((2, 6))
    traced = tm.trace_module(Leaky(), x)
    graph = traced.graph
    leaky = graph.get_function_by_type(F.leaky_relu).as_unique()
    assert leaky.named_args == {"inp": graph.inputs[1], "negative_slope": 0.1}
    leaky.set_arg("negative_slope", 0.3)
    assert "leaky_relu_out = nn.leaky_relu(x, 0.3, )" in str(graph)
    with pytest.raises(tm.TracedModuleError, match="no argument named"):
        leaky.set_arg("slope", 3)
    sigmoid_out = graph.get_function_by_type(F.sigmoid).as_unique().outputs[0]
    with pytest.raises(tm.TracedModuleError, match="made before it"):
        leaky.set_args_kwargs(sigmoid_out, 0.3)
    want = F.sigmoid(x) + F.leaky_relu(x, 0.3) * 2
    _close(traced(x), want)
    # an expression pinned with disable_remove survives compile, with what it reads
    with graph.insert_exprs():
        probe = F.exp(sigmoid_out)
    probe.expr.disable_remove()
    graph.compile()
    assert probe.expr in graph.exprs(recursive=False).as_list()
    probe.expr.enable_remove()
    graph.compile()
    assert probe.expr not in graph.exprs(recursive=False).as_list()
    _save_load_dump_run(traced, x, want.numpy())


def test_tensor_named_in_forward_names_its_node() -> None:
    # MegEngine: x.name = ... inside a traced forward names the node (graph._namespace.used_names)
    class Named(M.Module):
        def forward(self, x: Any) -> Any:
            y = x + 1
            y.name = "plus_one"
            z = y * 2
            z.name = "x"  # taken by the input: the node keeps its own name
            return z

    traced = tm.trace_module(Named(), megengine.tensor(np.ones(3, np.float32)))
    names = [n.name for n in traced.graph.nodes()]
    assert "plus_one" in names and names.count("x") == 1
    assert "plus_one" in traced.graph._namespace.used_names


def test_loaded_graph_is_numbered_afresh() -> None:
    # MegEngine: unpickling renumbers expressions and nodes in graph order, sub-graphs included
    class Block(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = M.Conv2d(2, 2, 1)

        def forward(self, x: Any) -> Any:
            return F.relu(self.conv(x)) + 1

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b0, self.b1 = Block(), Block()

        def forward(self, x: Any) -> Any:
            return self.b1(self.b0(x))

    traced = tm.trace_module(Net(), megengine.tensor(np.ones((1, 2, 3, 3), np.float32)))
    loaded = pickle.loads(pickle.dumps(traced))
    traced.graph._reset_ids()
    pairs = ((traced.graph.nodes(), loaded.graph.nodes()), (traced.graph.exprs(), loaded.graph.exprs()))
    for old, new in pairs:
        assert [n._id for n in old] == [n._id for n in new] == list(range(len(old.as_list())))
    assert loaded.graph._total_ids[0] == len(loaded.graph.nodes().as_list())
