"""``lightning-sfl cuts``: per cut point of a zoo model, the client half's size, the activation's size and the
training FLOPs on each side, checked against counts by hand (FedLC's Table 8 CNN) and the split identity."""

from __future__ import annotations

import pytest

from lightning_sfl.cli import main as cli_main
from lightning_sfl.cuts import cut_table, format_table
from lightning_sfl.models import build_model
from lightning_sfl.system.flops import training_flops_per_sample


def test_cnn_fedlc_costs_by_hand():
    """conv1 (10 filters 5x5 over 24x24 outputs), conv2 (20 filters 5x5x10 over 8x8), fc1 320x50, fc2 50x10; 2 FLOPs a
    multiply-add; the client's first layer costs 2x its forward (no input gradient), every other layer 3x."""
    conv1, conv2, fc1, fc2 = 24 * 24 * 10 * 25 * 2, 8 * 8 * 20 * 10 * 25 * 2, 320 * 50 * 2, 50 * 10 * 2
    rows = {r.cut: r for r in cut_table("cnn_fedlc")}
    assert rows["s1"].client_flops == 2 * conv1 and rows["s1"].server_flops == 3 * (conv2 + fc1 + fc2)
    assert rows["s2"].client_flops == 2 * conv1 + 3 * conv2 and rows["s2"].server_flops == 3 * (fc1 + fc2)
    assert rows["s3"].client_flops == 2 * conv1 + 3 * (conv2 + fc1) and rows["s3"].server_flops == 3 * fc2
    assert [rows[c].client_params for c in ("s1", "s2", "s3")] == [260, 260 + 5020, 260 + 5020 + 16050]
    assert [rows[c].activation_bytes for c in ("s1", "s2", "s3")] == [4 * 1440, 4 * 320, 4 * 50]
    assert [rows[c].client_bytes for c in ("s1", "s2", "s3")] == [4 * 260, 4 * 5280, 4 * 21330]
    assert rows["s2"].round_bytes(100) == 2 * 4 * 5280 + 2 * 4 * 320 * 100
    # U-shaped: the cuts that leave weights in the body (the layers between) and in the tail; none after s3's fc1
    assert [rows[c].tail_points for c in ("s1", "s2", "s3")] == [("s2", "s3"), ("s3",), ()]


@pytest.mark.parametrize("arch", ["alexnet_cifar", "cnn_svhn", "resnet18"])
def test_the_two_sides_add_up_to_the_whole_model(arch):
    rows = cut_table(arch)
    model = build_model(arch, 10, (3, 32, 32))
    whole = training_flops_per_sample(model, (3, 32, 32))
    assert [r.cut for r in rows] == list(model.cut_points)
    for r in rows:
        assert r.client_flops + r.server_flops == pytest.approx(whole, rel=1e-12)
        assert r.client_flops > 0 and r.server_flops > 0
    client = [r.client_flops for r in rows]
    assert client == sorted(client)  # a deeper cut gives the client more work


def test_cli_prints_a_row_per_cut_and_csv_parses(capsys):
    cli_main(["cuts", "--arch", "cnn_fedlc", "--samples", "160"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| s")]
    assert [line.split(" | ")[0] for line in lines] == ["| s1", "| s2", "| s3"]
    assert "traffic per client and round, 160 samples (KB)" in out and "10×12×12" in out
    csv_text = format_table(cut_table("cnn_small"), fmt="csv")
    rows = [line.split(",") for line in csv_text.splitlines()]
    assert len(rows) == 6 and all(len(r) == len(rows[0]) == 9 for r in rows)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--arch", "foo"], "arch='foo' is not one of: alexnet_mnist"),
        (["--arch", "torch.nn.Flatten"], "give one sample's shape (--input_shape C H W) for a model outside the zoo"),
        (["--arch", "cnn_small", "--arch.width", "3"], "'cnn_small' is a zoo model: it takes no init args"),
        (["--arch", "cnn_small", "--bogus", "3"], "unrecognized arguments: --bogus"),
        (["--arch", "alexnet_mnist", "--input_shape", "3", "32", "32"], "expects input shape (1, 28, 28)"),
        (["--arch", "vgg16", "--samples", "0"], "argument --samples: must be a positive integer, got '0'"),
        (["--arch", "cnn_small", "--format", "xls"], "argument --format: invalid choice: 'xls'"),
        (["--arch", "cnn_small", "--compression.ratio", "0.1"], "argument --compression.ratio: give --compression"),
        (["--arch", "cnn_small", "--compression", "TopK", "--compression.rate", "1"], "TopK takes: ratio, crossing"),
        (["--arch", "cnn_small", "--compression", "TopK", "--compression.ratio", "2"], "ratio=2 must be in (0, 1]"),
    ],
)
def test_bad_arguments_get_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["cuts", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_any_model_by_class_path_is_listed_by_module_name(capsys):
    """torchvision's ResNet: its cuts are its modules' names (no residual crosses them), the two sides add up."""
    resnet = ["--model.arch", "torchvision.models.ResNet", "--model.arch.block", "torchvision.models.resnet.BasicBlock"]
    cli_main(["cuts", *resnet, "--model.arch.layers", "[1,1,1,1]", "--input_shape", "3", "32", "32"])
    out = capsys.readouterr().out
    cuts = [line.split(" | ")[0][2:] for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert cuts[1:] == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"]
    # by hand: stem 3·64·7·7 + BN 128; layer1 2·(64·64·9 + 128); layer2 64·128·9 + 128·128·9 + 2·256 + 64·128 + 256
    stem, layer1, layer2 = 9408 + 128, 2 * (36864 + 128), 73728 + 147456 + 512 + 8192 + 256
    assert f"| layer2 | 6 | {stem + layer1 + layer2:,} |" in out and "| 128×4×4 |" in out
    init = {"block": "torchvision.models.resnet.BasicBlock", "layers": [1, 1, 1, 1]}
    rows = cut_table({"class_path": "torchvision.models.ResNet", "init_args": init}, 10, (3, 32, 32))
    assert len({round(r.client_flops + r.server_flops) for r in rows}) == 1


def test_the_compression_column_is_the_bytes_a_sample_sends_through_the_compressor(capsys):
    """cnn_small on the digits: s2's 64×4×4 float32 activation; top-k 10 % sends 103 values and uint16 indices (618 B),
    8-bit codes 1,024 B and two scales, C3-SL with groups of 4 a quarter of the dense 4,096 B."""
    for args, expected in (
        (["--compression", "TopK", "--compression.ratio", "0.1"], "0.618"),
        (["--compression", "Quantise", "--compression.bits=8"], "1.032"),
        (["--compression", "CircularConvolution", "--compression.group", "4"], "1.024"),
    ):
        cli_main(["cuts", "--arch", "cnn_small", *args])
        s2 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| s2"))
        assert s2.split(" | ")[6] == expected, (args, s2)
