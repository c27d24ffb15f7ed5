"""The model zoo: the digits models the runtime trains today, and larger ones (one module each beside
this one), each in plain torch.nn (no torchvision: poet must not depend on it)."""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import re
import sys
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from poet.errors import UsageError
from poet.files import MB, read_bytes
from poet.models.zoo.bert import bert
from poet.models.zoo.lenet import lenet5
from poet.models.zoo.mlperf_tiny import DSCNN, AutoEncoder, MobileNetV1, ResNet8
from poet.models.zoo.mobilenetv2 import mobilenetv2_cifar
from poet.models.zoo.resnet import resnet18_cifar
from poet.models.zoo.tiny_training import TinyTrainingNet
from poet.models.zoo.transformer import transformer_block
from poet.models.zoo.vgg import vgg16_cifar
from poet.models.zoo.vision import EfficientNetB0, MNASNet, MobileNetV3Small, ResNet18, ShuffleNetV2, SqueezeNet11


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    classes: int
    about: str
    # dtype of the input tensor: "float32" for images and features, "int64" for token ids
    # (then input_shape is (S,)). Last and defaulted so positional ZooModel(...) calls keep working.
    input_dtype: str = "float32"
    # the loss it trains with (TrainingGraph.loss): cross_entropy, or mse / l1 of its output against its input
    loss: str = "cross_entropy"


def _mlp() -> nn.Module:
    # Three hidden layers, so activations held across the forward pass (not just the
    # backward working set) set the keep-everything peak: the case recompute helps.
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, 32), relu1=nn.ReLU(), fc2=nn.Linear(32, 32), relu2=nn.ReLU(),
        fc3=nn.Linear(32, 32), relu3=nn.ReLU(), fc4=nn.Linear(32, 10)))


def _mlp_tiny() -> nn.Module:
    # mlp-digits at 16 wide: 1754 parameters (7 KB, as much again for gradients), so a batch of 8
    # trains in the MKR1000's 32 KB (tests/test_port_m0.py) with room left to plan.
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, 16), relu1=nn.ReLU(), fc2=nn.Linear(16, 16), relu2=nn.ReLU(),
        fc3=nn.Linear(16, 16), relu3=nn.ReLU(), fc4=nn.Linear(16, 10)))


class CnnDigits(nn.Module):
    """conv3x3(8) - relu - maxpool2 - flatten - fc(32) - relu - fc(10) on 1x8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("mlp-digits", _mlp, (64,), 10, "MLP 64-32-32-32-10 on flattened 8x8 digits"),
        ZooModel("cnn-digits", CnnDigits, (1, 8, 8), 10, "conv3x3x8-pool-fc32-fc10 on 8x8 digits"),
        ZooModel("lenet", lenet5, (1, 32, 32), 10, "LeNet-5 conv5-pool-conv5-pool-fc120-fc84-fc10 on 32x32"),
        ZooModel("resnet18-cifar", resnet18_cifar, (3, 32, 32), 10, "ResNet-18, CIFAR stem, 11.2M parameters"),
        ZooModel("vgg16-cifar", vgg16_cifar, (3, 32, 32), 10, "VGG-16 (D) with BatchNorm, fc 512-10, 14.7M"),
        ZooModel("mobilenetv2-cifar", mobilenetv2_cifar, (3, 32, 32), 10, "MobileNetV2 width 1.0, CIFAR strides"),
        ZooModel("mobilenetv2-cifar-0.35", lambda: mobilenetv2_cifar(0.35), (3, 32, 32), 10,
                 "MobileNetV2 width 0.35, CIFAR strides"),
        ZooModel("transformer-block", transformer_block, (32,), 10,
                 "one pre-LN encoder block d128 h4 ffn512 on 32 tokens of 1000, mean pool", input_dtype="int64"),
        ZooModel("bert-tiny", lambda: bert(2, 128, 2, 64, 1000, 10), (64,), 10,
                 "BERT L2 H128 A2, 64 tokens of 1000", input_dtype="int64"),
        ZooModel("bert-base", lambda: bert(12, 768, 12, 128, 30522, 10), (128,), 10,
                 "BERT-base L12 H768 A12, 128 tokens of 30522 (110M parameters)", input_dtype="int64"),
        # MLPerf Tiny's reference networks (models/zoo/mlperf_tiny.py)
        ZooModel("mlperf-kws", DSCNN, (1, 49, 10), 12,
                 "MLPerf Tiny keyword spotting: DS-CNN-S on 49x10 MFCC, 12 keywords"),
        ZooModel("mlperf-ic", ResNet8, (3, 32, 32), 10, "MLPerf Tiny image classification: ResNet-8 on 32x32 CIFAR-10"),
        ZooModel("mlperf-vww", MobileNetV1, (3, 96, 96), 2,
                 "MLPerf Tiny visual wake words: MobileNetV1 width 0.25 on 96x96, person or not"),
        ZooModel("mlperf-ad", AutoEncoder, (640,), 640,
                 "MLPerf Tiny anomaly detection: dense autoencoder 640-128x4-8-128x4-640, MSE", loss="mse"),
        # torchvision's small ImageNet networks, its names and forward (models/zoo/vision.py), at 32-96 px
        ZooModel("resnet18", lambda: ResNet18(10), (3, 64, 64), 10, "ResNet-18, ImageNet stem (7x7/2, max pool 3x3/2)"),
        ZooModel("squeezenet1.1", lambda: SqueezeNet11(10), (3, 32, 32), 10, "SqueezeNet 1.1 (fire modules)"),
        ZooModel("mnasnet-0.5", lambda: MNASNet(0.5, 10), (3, 64, 64), 10, "MNASNet 0.5"),
        ZooModel("mobilenetv3-small", lambda: MobileNetV3Small(10), (3, 96, 96), 10,
                 "MobileNetV3-Small (hardswish, squeeze-and-excitation)"),
        ZooModel("efficientnet-b0", lambda: EfficientNetB0(10), (3, 32, 32), 10,
                 "EfficientNet-B0 (SiLU, squeeze-and-excitation, stochastic depth)"),
        ZooModel("shufflenetv2-0.5", lambda: ShuffleNetV2(num_classes=10), (3, 64, 64), 10,
                 "ShuffleNetV2 x0.5 (chunk, channel shuffle)"),
        # MIT tiny-training's networks (Lin et al. 2022), from their int8 graphs (models/zoo/tiny_training.py)
        ZooModel("mbv2-w0.35", lambda: TinyTrainingNet("mbv2-w0.35"), (3, 128, 128), 10,
                 "tiny-training's MobileNetV2 w0.35 at 128x128 (BN folded, ReLU6), 16.6M MACs"),
        ZooModel("proxyless-w0.3", lambda: TinyTrainingNet("proxyless-w0.3"), (3, 128, 128), 10,
                 "tiny-training's ProxylessNAS w0.3 at 128x128 (BN folded, ReLU6), 18.6M MACs"),
        ZooModel("mcunet-5fps", lambda: TinyTrainingNet("mcunet-5fps"), (3, 128, 128), 10,
                 "tiny-training's MCUNet 5FPS at 128x128 (BN folded, ReLU6), 22.5M MACs"),
    )
}

# Models for the smallest boards, kept apart from ZOO (whose every entry has a published size checked
# in tests/test_zoo.py); get_model and the CLI take them like zoo names.
SMALL: dict[str, ZooModel] = {
    "mlp-tiny": ZooModel("mlp-tiny", _mlp_tiny, (64,), 10,
                         "MLP 64-16-16-16-10 on 8x8 digits (1754 parameters): fits the MKR1000's 32 KB"),
}


@dataclass(frozen=True)
class ModelChoice:
    """Which model to train and how: what `--model`, `--batch`, `--seed`, `--train` and the sizing
    options of a command line say."""

    name: str = "mlp-digits"
    batch: int = 16  # samples per training step
    seed: int = 0  # weight initialisation and data order
    train: str = "all"  # what trains (poet.graph.train_modes): all, bias, last:N, bias:K, layers:..., joined by +
    input_shape: tuple[int, ...] | None = None  # one sample, for a module:factory model
    classes: int | None = None  # for a module:factory model
    layers: int | None = None  # bert only
    hidden: int | None = None  # bert only
    weights: Path | None = None  # a state_dict to start from (pretrained), instead of the seed's weights

    def files(self) -> list[tuple[str, Path | None]]:
        """The files this choice reads, by option: a module:factory model's source (found, not imported),
        for an output that must not be one of them (poet.files.not_an_input)."""
        source = None
        module = self.name.partition(":")[0] if ":" in self.name else ""
        if module:
            if os.getcwd() not in sys.path:  # where _user_model will look
                sys.path.insert(0, os.getcwd())
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):  # loading it says what is wrong, in one line
                spec = None
            if spec is not None and spec.origin and Path(spec.origin).is_file():
                source = Path(spec.origin)
        return [("--model", source)]

    def build(self) -> tuple[nn.Module, ZooModel]:
        model, spec = get_model(self.name, seed=self.seed, input_shape=self.input_shape, classes=self.classes,
                                layers=self.layers, hidden=self.hidden)
        if self.weights is not None:
            load_state(model, self.name, self.weights)
        return model, spec


# Slack over the model's own tensors a --weights file may have: the zip's pickle and headers, float64
# tensors (twice fp32), tensors saved as views of a larger storage (torch.save writes the storage whole)
WEIGHTS_SLACK = 4
WEIGHTS_OVERHEAD = 64 * MB


def _kind(t: torch.Tensor) -> str:
    """What a tensor's values are, as a state_dict's tensor must match its model's: a float weight takes
    any float dtype (cast on load), an int64 counter (batch norm's num_batches_tracked) any integer."""
    if t.is_complex():
        return "complex"
    if t.is_floating_point():
        return "float"
    return "bool" if t.dtype == torch.bool else "integer"


def load_state(model: nn.Module, name: str, path: Path) -> None:
    """Load a state_dict file (`torch.save(model.state_dict(), path)`) into the model; a file that is no
    state_dict, or one of another model, is refused in one line naming the first difference. Only tensors
    are read (weights_only): a .pt file cannot run code here. The file is read once as a regular file no
    larger than the model's tensors could make it (a link to /dev/zero, a FIFO, a 100 GB file: refused
    unread), and must be the zip torch.save writes, stored uncompressed as torch writes it: no member
    may unpack to more than the file holds."""
    own = model.state_dict()
    limit = WEIGHTS_SLACK * sum(t.numel() * t.element_size() for t in own.values()) + WEIGHTS_OVERHEAD
    data = read_bytes(path, "--weights", limit=limit)
    _check_zip(path, data)
    try:
        with warnings.catch_warnings():  # torch's deprecation notes (TypedStorage, quantized) are no line of poet's
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle of anything, a truncated zip, a tensor torch cannot rebuild
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # torch colours its weights_only advice
        refused = re.search(r"WeightsUnpickler error: ([^\n]*)", text)
        if refused:  # the pickle holds objects: torch's advice to load it unsafely is not poet's to give
            raise UsageError(f"--weights {path}: not a state_dict: it holds more than tensors, which poet does not "
                             f"unpickle ({refused.group(1).split(' was not')[0][:100]}); save the model's "
                             "state_dict") from None
        msg = " ".join(text.split())[:120] or type(exc).__name__
        raise UsageError(f"--weights {path}: not a state_dict torch.load can read safely ({msg})") from None
    if isinstance(state, nn.Module) or not isinstance(state, dict) \
            or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UsageError(f"--weights {path}: not a state_dict (save one with torch.save(model.state_dict(), "
                         "path))")
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        which = f"lacks {missing[0]}" if missing else f"has {unexpected[0]}, which {name} does not"
        raise UsageError(f"--weights {path}: not a state_dict of {name}: it {which} "
                         f"({len(missing)} missing, {len(unexpected)} unexpected of {len(own)} tensors)")
    for k, v in own.items():
        t = state[k]
        # each of these would fail inside load_state_dict (an internal error) or load other values than
        # saved (complex: the imaginary part dropped; an int weight: no fraction)
        if t.device.type == "meta":
            raise UsageError(f"--weights {path}: {k} is a meta tensor (a shape without values: saved from a model "
                             "built on the meta device)")
        if t.layout != torch.strided or getattr(t, "is_nested", False):
            raise UsageError(f"--weights {path}: {k} is a {str(t.layout).removeprefix('torch.')} tensor; poet loads "
                             "dense ones (t.to_dense())")
        if t.is_quantized:
            raise UsageError(f"--weights {path}: {k} is quantized ({t.dtype}); save the float model's state_dict "
                             "(or t.dequantize())")
        if _kind(t) != _kind(v):
            raise UsageError(f"--weights {path}: {k} is {str(t.dtype).removeprefix('torch.')}, {name} has "
                             f"{str(v.dtype).removeprefix('torch.')} ({_kind(v)} values)")
        if tuple(t.shape) != tuple(v.shape):
            raise UsageError(f"--weights {path}: {k} has shape {tuple(t.shape)}, {name} has "
                             f"{tuple(v.shape)}")
        # finite as the model holds them: a float64 1e300 is infinite in fp32
        if t.is_floating_point() and not torch.isfinite(t.to(v.dtype)).all():
            past = bool(torch.isfinite(t).all())  # finite as saved, not as the model holds it
            raise UsageError(f"--weights {path}: {k} holds NaN or infinite values"
                             + (f" (as {str(v.dtype).removeprefix('torch.')})" if past else ""))
    model.load_state_dict(state)


# torch.save's format before 1.6 begins with its magic number pickled (protocol 2, a 10-byte long)
LEGACY_MAGIC = b"\x80\x02\x8a\x0a"


def _check_zip(path: Path, data: bytes) -> None:
    """The zip torch.save writes (since PyTorch 1.6), its members stored: the older format and a
    compressed member declare sizes torch allocates before it reads them, which no file size bounds."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        if data.startswith(LEGACY_MAGIC):
            raise UsageError(f"--weights {path}: saved in torch.save's format of before PyTorch 1.6, whose tensor "
                             "sizes poet cannot check before torch allocates them: load it and torch.save it again")\
                from None
        raise UsageError(f"--weights {path}: not a state_dict saved by torch.save (a zip archive; this is not "
                         f"one: {' '.join(str(exc).split())[:80]})") from None
    packed = [m.filename for m in members if m.compress_type != zipfile.ZIP_STORED]
    if packed:
        raise UsageError(f"--weights {path}: {packed[0]} is compressed in the archive; torch.save stores its "
                         "members uncompressed: save the state_dict again with torch.save")
    if sum(m.file_size for m in members) > len(data):
        raise UsageError(f"--weights {path}: its members claim more bytes than the file holds: damaged")


def get_model(name: str, seed: int = 0, input_shape: tuple[int, ...] | None = None,
              classes: int | None = None, layers: int | None = None,
              hidden: int | None = None) -> tuple[nn.Module, ZooModel]:
    """A freshly initialised model: a zoo name, or `package.module:factory` for the user's own.

    The same seed gives the same weights on every machine. A user's factory is called
    without arguments and must return an nn.Module; its input shape (one sample) must
    be given, since nothing in a module says what it expects.
    """
    if ":" in name:
        spec = _user_model(name, input_shape, classes)
    elif name in ZOO or name in SMALL:
        spec = ZOO.get(name) or SMALL[name]
    elif name == "bert":  # the BERT family, sized on the command line
        spec = _bert(layers or 12, hidden or 768)
    else:
        raise UsageError(f"unknown model {name!r}; known: {', '.join([*ZOO, *SMALL])}, bert (with --layers, "
                         f"--hidden), or package.module:factory")
    if (layers is not None or hidden is not None) and name != "bert":
        raise UsageError(f"--layers and --hidden size the bert model, not {name}")
    if (input_shape is not None or classes is not None) and ":" not in name:
        raise UsageError(f"--input-shape and --classes describe a model of your own (module:factory); {name} takes "
                         f"{'x'.join(map(str, spec.input_shape))} samples and {spec.classes} classes")
    _check_size(name, spec)
    torch.manual_seed(seed)
    try:
        model = spec.build()
    except Exception as exc:  # a user's factory can raise anything: one line, where and what
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise UsageError(f"building model {name!r} failed: {type(exc).__name__}: {msg}") from exc
    if not isinstance(model, nn.Module):
        raise UsageError(f"{name} returned {type(model).__name__}, not a torch.nn.Module")
    if ":" in name:
        spec = _described(name, spec, model, input_shape, classes)
    return model, spec


# Far above anything a board fine-tunes; a model past it would first fill the host's memory with
# its fp32 weights (bert --layers 256 --hidden 8192 is 769 GiB) before anything could refuse it.
MAX_MODEL_BYTES = 2**32


def _check_size(name: str, spec: ZooModel) -> None:
    """Count the parameters on the meta device (no memory) before the real build allocates them.
    A user's factory is not built twice: its constructor may have side effects or be slow."""
    if ":" in name:
        return
    with torch.device("meta"):
        n = sum(p.numel() for p in spec.build().parameters())
    if 4 * n > MAX_MODEL_BYTES:
        raise UsageError(f"model {name!r} has {n:,} parameters ({4 * n / 2**30:.1f} GiB in fp32); poet builds models "
                         f"up to {MAX_MODEL_BYTES / 2**30:.0f} GiB: use fewer --layers or a smaller --hidden")


def _bert(layers: int, hidden: int) -> ZooModel:
    if layers < 1 or hidden < 64 or hidden % 64:
        raise UsageError(f"bert --layers {layers} --hidden {hidden}: need L >= 1 and H a multiple of 64 "
                         f"(BERT's heads are 64 wide)")
    return ZooModel("bert", lambda: bert(layers, hidden, hidden // 64, 128, 30522, 10), (128,), 10,
                    f"BERT L{layers} H{hidden} A{hidden // 64}", input_dtype="int64")


def _user_model(name: str, input_shape: tuple[int, ...] | None, classes: int | None) -> ZooModel:
    module, _, attr = name.partition(":")
    if not module or not attr:
        raise UsageError(f"--model {name!r}: give package.module:factory, e.g. mynet:build")
    if os.getcwd() not in sys.path:  # the user's own modules, as `python -m` would find them
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load model {name!r}: {exc}") from exc
    if not callable(factory):
        raise UsageError(f"{name} is not callable; give a function or class that builds the model")
    return ZooModel(name, factory, tuple(input_shape or ()), classes or 10, f"user model {name}")


def _described(name: str, spec: ZooModel, model: nn.Module, input_shape: tuple[int, ...] | None,
               classes: int | None) -> ZooModel:
    """A user's model as it describes itself where the command line does not: its `input_shape` (one
    sample) and `classes` attributes, as models written for a framework often carry them, and its
    `input_dtype` ("int64" for one that reads token ids; the command line has no option for it)."""
    dtype = getattr(model, "input_dtype", None)
    if dtype is not None:
        if dtype not in ("float32", "int64"):
            raise UsageError(f"{name}: its input_dtype attribute {dtype!r} is not 'float32' or 'int64' (token ids)")
        spec = replace(spec, input_dtype=dtype)
    if not input_shape:
        shape = getattr(model, "input_shape", None)
        if shape is None:
            raise UsageError(f"--input-shape is needed for {name}: the shape of one sample, e.g. --input-shape "
                             "1,8,8 (or give the model an input_shape attribute)")
        if not (isinstance(shape, tuple | list | torch.Size) and shape
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise UsageError(f"{name}: its input_shape attribute {shape!r} is not one sample's shape (positive "
                             "ints, e.g. (1, 8, 8)); give --input-shape")
        spec = replace(spec, input_shape=tuple(shape))
    if classes is None:
        n = getattr(model, "classes", None)
        if n is not None:
            if not (isinstance(n, int) and not isinstance(n, bool) and n > 0):
                raise UsageError(f"{name}: its classes attribute {n!r} is not a positive int; give --classes")
            spec = replace(spec, classes=n)
    return spec
