"""``lightning-sfl attack``: attacks on what the client half of any split method's checkpoint uploads.

``--attack inversion`` (default; an honest-but-curious server that holds the trained client half, as in ResSFL's
evaluation and the SCALA journal's Table VI):

1. encodes images ``x`` with the checkpoint's client half (eval mode): pairs ``(A = h(w_c; x), x)``;
2. trains a decoder from scratch (:func:`~lightning_sfl.privacy.inversion.inversion_decoder`, 64 channels; Adam
   ``1e-3``, batch 32, 50 epochs, MSE — ResSFL's attack) on pairs from the **training split**, keeping the epoch with
   the lowest MSE on a held-out part of it (``--val_fraction``);
3. reconstructs the **test split** (never used to train the decoder; ResSFL trains and scores on the test set) and
   reports the means over images of MSE, SSIM and PSNR (:mod:`lightning_sfl.privacy.metrics`).

``--attack unsplit`` (UnSplit, :mod:`lightning_sfl.privacy.unsplit`; an honest-but-curious server that knows the
client half's architecture but neither its weights nor any data) observes the activations of ``--targets`` test
images and optimises images and a clone of the client half together to explain them; it also reports the clone's
test accuracy in front of the checkpoint's server half (``clone_accuracy``: model stealing).

``--attack labels`` (:mod:`lightning_sfl.privacy.label_attack`; what the server learns of the clients' labels: a
plain split's server receives them, a U-shaped one, ``--model.tail_point``, the gradients of the clients' losses
w.r.t. its body's outputs) scores the norm and direction attacks (AUC, binary tasks: ``--data.binary_class``), a
clustering of the gradients, the known-tail attack, model completion and per-client histograms against the true
labels of ``--rows_per_client`` rows of every client; ``metrics.json`` and ``metrics.md``, no picture.

The inversion attackers see what the clients upload: with the method's activation defences
(``--model.activation_noise``, ``--model.noise_bound``) the activations are bounded and noised as in training, the
noise drawn from ``--seed``.

Images are scored in ``[0, 1]`` (the stored pixels, before normalisation). Written to ``--out`` (default: the run's
next ``<run folder>/attack-<n>`` for a checkpoint of a run folder, the fit's own files untouched; a folder ``attack``
next to a checkpoint kept elsewhere; created once every check has passed, so that a bad input writes nothing):
``metrics.json``, ``metrics.md`` and ``reconstructions.png`` (labelled rows: originals, and reconstructions with each
image's SSIM and PSNR; method, rounds and mean scores in the title). The same scores, the attacker's training curves
(``attack/train_mse``, ``attack/val_mse`` against ``attack/epoch``) and the picture (``attack/reconstructions``) go to
a W&B run (``job_type=attack``, files under the output folder), offline unless W&B's own switches say otherwise (as
for ``fit``); ``--no_wandb`` skips it. The same command scores SCALA, SCALA-PE, SplitFedV1, … alike. On a terminal,
stderr shows the progress of the decoder's training and of UnSplit's steps (:mod:`lightning_sfl.privacy.progress`,
cleared when done); the last line is the result's.

    lightning-sfl attack --config configs/digits/scala_pe.yaml --ckpt_path last   # the latest fit of that config
    lightning-sfl attack --ckpt_path runs/…/checkpoints/last.ckpt                   # any split method's checkpoint
    lightning-sfl attack --attack unsplit --ckpt_path runs/…/checkpoints/last.ckpt  # UnSplit (no data, no weights)
    lightning-sfl attack --attack labels --ckpt_path runs/…/checkpoints/last.ckpt   # the labels' leakage

``--config`` (repeatable, merged as ``fit`` merges them) gives the data; without it the data module's arguments saved
in the checkpoint are used. The fit's own options go after ``--`` (``... --config c.yaml -- --model.tail_point s4``):
with ``--ckpt_path last`` they name the fit's run folder, as the configs do, and they change the data as they did in
the fit. The method and its client half always come from the checkpoint.
"""

from __future__ import annotations

import argparse
import sys

from lightning_sfl.attack_io import grid_indices, save_grid
from lightning_sfl.errors import OneLineArgumentParser

__all__ = [
    "ATTACKS",
    "check_args",
    "fit_arguments",
    "grid_indices",
    "main",
    "parse_args",
    "run_attack",
    "save_grid",
    "train_attacker",
]

#: ``--attack`` choices.
ATTACKS = ("inversion", "unsplit", "labels")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineArgumentParser(
        prog="lightning-sfl attack",
        description="Attack what a split checkpoint's client half uploads: --attack inversion (a decoder trained on "
        "(activation, image) pairs of the training split) or unsplit (images and a clone of the client half from the "
        "activations alone), scoring the test images' reconstructions (MSE, SSIM, PSNR); --attack labels scores what "
        "the server learns of the clients' labels.",
    )
    parser.add_argument(
        "--ckpt_path", help="checkpoint of a split method (required); last: the latest fit of the same --config files"
    )
    parser.add_argument(
        "--attack",
        default="inversion",
        help="inversion (a decoder trained on (activation, image) pairs; default), unsplit (no data, no weights) or "
        "labels (what the server learns of the labels)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="config(s) giving the data (as fit merges them); the fit's options go after --",
    )
    parser.add_argument(
        "--out", help="output folder (default: <run folder>/attack-<n>; 'attack' next to a checkpoint kept elsewhere)"
    )
    parser.add_argument("--epochs", type=int, default=50, help="decoder training epochs (default 50)")
    parser.add_argument("--width", type=int, default=64, help="decoder channels (default 64)")
    parser.add_argument("--batch_size", type=int, default=32, help="decoder batch size (default 32)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate of the attacker (default 1e-3)")
    parser.add_argument("--targets", type=int, default=64, help="unsplit: test images to invert (default 64)")
    parser.add_argument("--outer", type=int, default=20, help="unsplit: alternations (default 20; the authors 1000)")
    parser.add_argument("--inner", type=int, default=50, help="unsplit: Adam steps a phase (default 50; authors 100)")
    parser.add_argument("--tv_weight", type=float, default=0.1, help="unsplit: total variation weight (default 0.1)")
    parser.add_argument("--l2_weight", type=float, default=0.0, help="unsplit: the code's mean(x^2) weight (0; code 1)")
    parser.add_argument("--rows_per_client", type=int, default=64, help="labels: rows of each client (default 64)")
    parser.add_argument("--known_per_class", type=int, default=4, help="labels: rows the attacker knows (default 4)")
    parser.add_argument("--completion_epochs", type=int, default=200, help="labels: model completion steps (200)")
    parser.add_argument("--val_fraction", type=float, default=0.1, help="training-split share for model selection")
    parser.add_argument("--train_size", type=int, default=None, help="use at most this many training images")
    parser.add_argument("--grid", type=int, default=16, help="test images in reconstructions.png, classes in turn")
    parser.add_argument("--seed", type=int, default=0, help="decoder initialisation and shuffling")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; 0: torch's default)")
    parser.add_argument("--device", default="auto", help="where the decoder trains: auto (cuda if available), cpu, …")
    parser.add_argument("--wandb_project", default="lightning-sfl", help="W&B project (default lightning-sfl)")
    parser.add_argument("--no_wandb", action="store_true", help="do not log to W&B")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module of your own to import first (repeatable): the one defining the checkpoint's model, dataset or "
        "method, as fit's --model.arch mymodule.MyNet imported it (a checkpoint names no code to import)",
    )
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.fit_options = argv[split + 1 :]
    return args


def fit_arguments(args: argparse.Namespace) -> list[str]:
    """The fit's arguments that ``args`` repeat: its ``--config`` files, then its options (after ``--``)."""
    return [a for c in args.config for a in ("--config", c)] + list(args.fit_options)


def check_args(args: argparse.Namespace) -> None:
    """One-line :class:`~lightning_sfl.errors.ConfigError` for bad settings, before anything is loaded."""
    from lightning_sfl.errors import ConfigError

    if args.attack not in ATTACKS:
        raise ConfigError(f"--attack={args.attack!r} must be one of: {', '.join(ATTACKS)}")
    if not args.ckpt_path:
        raise ConfigError("attack needs --ckpt_path: a checkpoint of a split method (e.g. runs/.../last.ckpt, or last)")
    if args.ckpt_path == "last" and not args.config:
        raise ConfigError("--ckpt_path last needs the --config the fit ran with (its run folder is named by it)")
    if getattr(args, "fit_options", None) and not args.config:
        raise ConfigError(f"the fit's options after -- ({' '.join(args.fit_options)}) need the --config it ran with")
    for name, low in (
        *(("epochs", 1), ("width", 1), ("batch_size", 2), ("grid", 1), ("threads", 0)),
        *(("targets", 1), ("outer", 1), ("inner", 1)),
        *(("rows_per_client", 1), ("known_per_class", 1), ("completion_epochs", 1)),
    ):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name}={getattr(args, name)} must be >= {low}")
    if args.train_size is not None and args.train_size < 3:
        raise ConfigError(f"--train_size={args.train_size} must be >= 3 (training and validation images)")
    if not 0 < args.val_fraction < 1:
        raise ConfigError(f"--val_fraction={args.val_fraction} must be in (0, 1)")
    if not args.lr > 0:
        raise ConfigError(f"--lr={args.lr} must be > 0")
    for name in ("tv_weight", "l2_weight"):
        if not getattr(args, name) >= 0:
            raise ConfigError(f"--{name}={getattr(args, name)} must be >= 0")
    if args.device != "auto":
        import torch

        try:
            torch.device(args.device)
        except RuntimeError:
            raise ConfigError(f"--device={args.device!r} is not a torch device: auto, cpu, cuda, cuda:0, …") from None


def _data_module(args: argparse.Namespace, ckpt: dict):
    from lightning_sfl.data import FederatedDataModule
    from lightning_sfl.errors import ConfigError

    if args.config:
        import warnings

        from lightning_sfl.lightning_cli import resolved_config

        with warnings.catch_warnings():  # LightningCLI warns that sys.argv (this command's) is not what it parses
            warnings.filterwarnings("ignore", message=".*args parameter is intended")
            data = resolved_config(fit_arguments(args)).get("data") or {}
        data = data.get("init_args", data)
    else:
        data = ckpt.get("datamodule_hyper_parameters")
        if not data:
            raise ConfigError("attack needs --config (the data) for a checkpoint that does not record its data module")
        data = {**data, "download": False}  # (a checkpoint never makes the tool write: no download on its word)
    return FederatedDataModule(**{k: v for k, v in data.items() if not k.startswith("_")})


def _trained_method(ckpt: dict, path: str):
    """The checkpoint's method rebuilt from its hyperparameters, with the saved global halves loaded (the client half
    ``[B, C, H, W] -> [B, *act]`` and the server half), in eval mode; its name and input shape."""
    from lightning_sfl.checkpoint import checkpoint_method, legacy_hyperparameters
    from lightning_sfl.errors import ConfigError
    from lightning_sfl.runtime.shape import require_cut

    recorded = (ckpt.get("lightning_sfl") or {}).get("algorithm", "")
    cls = checkpoint_method(ckpt)  # (a name the library knows: never imported on the checkpoint's word)
    if cls is None:
        raise ConfigError(
            f"ckpt_path={path!r} was written by {recorded or 'an unknown method'}, a method the library does not know "
            "(a file names no code to import)"
        )
    require_cut(cls, "no activations to invert")
    hparams = {k: v for k, v in (ckpt.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    hparams = legacy_hyperparameters(cls, hparams)  # checkpoints of earlier versions
    model = cls(**hparams)
    for half in ("client", "server", "tail"):
        if getattr(model, half, None) is None:  # the clients' tail: U-shaped runs only
            continue
        prefix = f"{half}.net."
        state = {k.removeprefix(prefix): v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
        try:
            getattr(model, half).net.load_state_dict(state)
        except RuntimeError as err:
            raise ConfigError(f"ckpt_path={path!r}: its {half} half does not fit {cls.__name__}: {err}") from None
    return model.eval(), cls.__name__, tuple(hparams.get("input_shape", ()))


def _images(x):
    """Stored pixels ``[N, C, H, W]`` (uint8 or floats in [0, 1]) as floats in ``[0, 1]``."""
    import torch

    return (x.float() / 255.0 if x.dtype == torch.uint8 else x.float()).clamp(0, 1)


def _encode(model, splits, x, device, noise, batch: int = 512):
    """What the clients upload for stored images ``x`` ``[N, C, H, W]`` (normalised as in training): the client
    half's activations ``[N, *act]``, bounded and noised (generator ``noise``) as the method's defences have it."""
    import torch

    def upload(rows):
        z = model.client.net(splits.to_float(rows).to(device))
        return model.defences.upload(z, noise)

    with torch.no_grad():
        return torch.cat([upload(x[i : i + batch]) for i in range(0, len(x), batch)])


def train_attacker(a_train, x_train, a_val, x_val, *, width: int, epochs: int, batch_size: int, lr: float, seed: int):
    """ResSFL's attack: a decoder ``[N, *act] -> [N, C, H, W]`` of ``width`` channels trained from scratch with Adam on
    the mean per-image MSE of ``(a_train, x_train)`` for ``epochs`` epochs of shuffled batches; the weights of the
    epoch with the lowest MSE on ``(a_val, x_val)`` are kept. Returns ``(decoder in eval mode, best epoch, history)``,
    ``history`` one ``{"attack/epoch", "attack/train_mse", "attack/val_mse"}`` per epoch. On a terminal, stderr shows a
    bar of the steps with the epoch's running training MSE and the last validation MSE
    (:class:`~lightning_sfl.privacy.progress.Progress`)."""
    import copy

    import torch

    from lightning_sfl.privacy.inversion import inversion_decoder
    from lightning_sfl.privacy.metrics import mse_per_image
    from lightning_sfl.privacy.progress import Progress

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    decoder = inversion_decoder(tuple(a_train.shape[1:]), tuple(x_train.shape[1:]), width).to(a_train.device)
    opt = torch.optim.Adam(decoder.parameters(), lr=lr)
    best, best_mse, best_epoch, history = copy.deepcopy(decoder.state_dict()), float("inf"), 0, []
    per_epoch = -(-len(a_train) // batch_size) - (len(a_train) % batch_size == 1)  # a last batch of one is skipped
    shown: dict[str, float] = {}
    with Progress(epochs * per_epoch, "decoder") as progress:
        for epoch in range(1, epochs + 1):
            progress.describe(f"decoder epoch {epoch}/{epochs}")
            decoder.train()
            total, rows = a_train.new_zeros(()), 0
            for idx in torch.randperm(len(a_train), generator=gen).split(batch_size):
                if len(idx) < 2:  # BatchNorm needs two images
                    continue
                idx = idx.to(a_train.device)
                opt.zero_grad()
                loss = mse_per_image(decoder(a_train[idx]), x_train[idx]).mean()
                loss.backward()
                opt.step()
                total, rows = total + loss.detach() * len(idx), rows + len(idx)
                progress.advance(train_mse=total / rows, **shown)
            decoder.eval()
            with torch.no_grad():
                val = float(mse_per_image(decoder(a_val), x_val).mean())
            history.append({"attack/epoch": epoch, "attack/train_mse": float(total) / rows, "attack/val_mse": val})
            shown["val_mse"] = val
            if val < best_mse:
                best, best_mse, best_epoch = copy.deepcopy(decoder.state_dict()), val, epoch
    decoder.load_state_dict(best)
    return decoder.eval(), best_epoch, history


def run_attack(args: argparse.Namespace) -> dict:
    """The attack (see the module docstring); returns the metrics written to ``metrics.json``. The folder written is
    ``args.written_to``, created only once every check has passed and the attack has run (a bad input writes
    nothing)."""
    import torch

    from lightning_sfl.attack_io import claim_output_folder, log_to_wandb, output_folder, write_scores
    from lightning_sfl.checkpoint import check_checkpoint, check_fits_data
    from lightning_sfl.errors import ConfigError, check_output_folder
    from lightning_sfl.privacy.metrics import reconstruction_scores
    from lightning_sfl.run_folder import Evaluated
    from lightning_sfl.wandb.online import announce_offline

    check_args(args)
    if args.ckpt_path == "last":
        from lightning_sfl.lightning_cli import evaluated_of_fit

        evaluated = evaluated_of_fit(fit_arguments(args))
        args.ckpt_path = str(evaluated.checkpoint)
    else:
        evaluated = Evaluated.of(args.ckpt_path, None)
    if args.threads >= 1:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    ckpt = check_checkpoint(args.ckpt_path)
    check_output_folder("--out", output_folder(args.ckpt_path, args.out))  # before the minutes of work, not after
    model, method, _ = _trained_method(ckpt, args.ckpt_path)
    data = _data_module(args, ckpt)
    splits = data.splits
    check_fits_data(ckpt, f"ckpt_path={args.ckpt_path!r}", data.num_classes, splits.input_shape, dict(data.hparams))
    if args.attack == "labels":
        return _labels(args, ckpt, model, method, data, evaluated)
    with torch.no_grad():
        act_dims = model.client.net(torch.zeros(1, *splits.input_shape)).dim()
    if act_dims != 4:
        raise ConfigError(f"{method}'s cut is not convolutional ([C, H, W] activations): no images to invert")
    model = model.to(device)
    offline = None if args.no_wandb else announce_offline()  # W&B online that cannot start: offline, said now
    print(evaluated.line("attacking"), flush=True)  # every check has passed
    noise = torch.Generator().manual_seed(args.seed)  # the defence's noise on what the attacker observes
    attack = _unsplit if args.attack == "unsplit" else _inversion
    x_hat, x_test, labels, details, history = attack(args, model, splits, device, noise)
    metrics = {
        **reconstruction_scores(x_hat, x_test),
        "attack": args.attack,
        "method": method,
        "checkpoint": str(args.ckpt_path),
        "rounds": int(ckpt.get("epoch", -1)) + 1,  # the global rounds the checkpoint's model was trained for
        "dataset": splits.name,
        "defences": {type(d).__name__: d.config()["init_args"] for d in model.defences.values()},
        "test_images": len(x_test),
        **details,
    }
    out = args.written_to = claim_output_folder(args.ckpt_path, args.out)  # created now: every check has passed
    write_scores(out, metrics)
    grid = out / "reconstructions.png"
    shown = grid_indices(labels, args.grid).to(x_test.device)
    title = (
        f"{method} after {metrics['rounds']} rounds ({splits.name}): {ATTACK_TITLES[args.attack]} of {len(x_test)} "
        f"test images, MSE {metrics['mse']:.4f}, SSIM {metrics['ssim']:.3f}, PSNR {metrics['psnr']:.1f} dB"
    )
    save_grid(x_test[shown].cpu(), x_hat[shown].cpu(), grid, title=title)
    if not args.no_wandb:
        trained_by = (ckpt.get("lightning_sfl") or {}).get("wandb_id")
        args.wandb_saved = log_to_wandb(args.wandb_project, metrics, history, grid, trained_by, offline=offline)
    return metrics


ATTACK_TITLES = {"inversion": "model inversion", "unsplit": "UnSplit"}


def _labels(args, ckpt, model, method, data, evaluated) -> dict:
    """``--attack labels`` (:mod:`~lightning_sfl.privacy.label_attack`): what the server learns of the labels."""
    from lightning_sfl.attack_io import claim_output_folder, log_to_wandb, write_label_scores
    from lightning_sfl.privacy.label_attack import client_tails, label_attacks
    from lightning_sfl.wandb.online import announce_offline

    offline = None if args.no_wandb else announce_offline()
    print(evaluated.line("attacking"), flush=True)  # every check has passed
    options = {k: getattr(args, k) for k in ("rows_per_client", "known_per_class", "completion_epochs", "seed")}
    tails = client_tails(ckpt, args.ckpt_path)  # each client's own, where the clients kept their tails
    scores = label_attacks(model.cpu(), data.client_stats, data.splits, tails=tails, **options)
    metrics = {
        "attack": "labels",
        "method": method,
        "checkpoint": str(args.ckpt_path),
        "rounds": int(ckpt.get("epoch", -1)) + 1,
        "dataset": data.splits.name,
        "tail_point": model.hparams.get("tail_point"),
        "defences": {type(d).__name__: d.config()["init_args"] for d in model.defences.values()},
        **scores,
        **options,
    }
    out = args.written_to = claim_output_folder(args.ckpt_path, args.out)
    write_label_scores(out, metrics)
    if not args.no_wandb:
        trained_by = (ckpt.get("lightning_sfl") or {}).get("wandb_id")
        summary = out / "metrics.md"  # where the W&B run's files go beside (no picture for this attack)
        args.wandb_saved = log_to_wandb(args.wandb_project, metrics, [], summary, trained_by, offline=offline)
    return metrics


def _inversion(args, model, splits, device, noise):
    """ResSFL's decoder attack (the module docstring): the test split's reconstructions."""
    import torch

    order = torch.randperm(len(splits.train_x), generator=torch.Generator().manual_seed(args.seed))[: args.train_size]
    n_val = max(1, round(args.val_fraction * len(order)))
    train_idx, val_idx = order[n_val:], order[:n_val]
    parts = (splits.train_x[train_idx], splits.train_x[val_idx], splits.test_x)
    a_train, a_val, a_test = (_encode(model, splits, x, device, noise) for x in parts)
    x_train, x_val, x_test = (_images(x).to(device) for x in parts)
    options = {k: getattr(args, k) for k in ("width", "epochs", "batch_size", "lr", "seed")}
    decoder, best_epoch, history = train_attacker(a_train, x_train, a_val, x_val, **options)
    with torch.no_grad():
        x_hat = torch.cat([decoder(a_test[i : i + 512]) for i in range(0, len(a_test), 512)])
    details = {
        "activation_shape": list(a_test.shape[1:]),
        "attack_train_images": len(train_idx),
        "attack_val_images": len(val_idx),
        "best_epoch": best_epoch,
        "best_val_mse": min(h["attack/val_mse"] for h in history),
        **options,
    }
    return x_hat, x_test, splits.test_y, details, history


def _unsplit(args, model, splits, device, noise):
    """UnSplit on ``--targets`` test images (classes in turn), and the clone's accuracy in front of the server half."""
    import copy

    import torch

    from lightning_sfl.privacy.unsplit import UnSplitSettings, unsplit

    targets = grid_indices(splits.test_y, args.targets)
    observed = _encode(model, splits, splits.test_x[targets], device, noise)
    torch.manual_seed(args.seed)
    clone = copy.deepcopy(model.client.net)
    for layer in clone.modules():  # the architecture, freshly initialised: the attacker has no weights
        if hasattr(layer, "reset_parameters"):
            layer.reset_parameters()
    settings = UnSplitSettings(args.outer, args.inner, args.lr, args.tv_weight, args.l2_weight)
    history: list[dict] = []
    to_input = lambda images: splits.to_float(images)  # noqa: E731  (pixels in [0, 1] -> the model's input)
    x_hat = unsplit(observed, clone, tuple(splits.input_shape), to_input, settings, history)
    with torch.no_grad():
        correct = sum(
            int(
                (
                    model.server.net(clone(splits.to_float(splits.test_x[i : i + 512]).to(device))).argmax(1).cpu()
                    == splits.test_y[i : i + 512]
                ).sum()
            )
            for i in range(0, len(splits.test_x), 512)
        )
    details = {
        "activation_shape": list(observed.shape[1:]),
        "clone_accuracy": correct / len(splits.test_x),
        "final_activation_mse": history[-1]["attack/activation_mse"],
        **{k: getattr(args, k) for k in ("targets", "outer", "inner", "lr", "tv_weight", "l2_weight", "seed")},
    }
    return x_hat, _images(splits.test_x[targets]).to(device), splits.test_y[targets], details, history


def import_modules(modules: list[str]) -> None:
    """Import the modules the command line names (``--import``); one that cannot be imported is one line."""
    import importlib

    from lightning_sfl.errors import ConfigError

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"--import {module}: {exc} (is its folder on PYTHONPATH?)") from None


def main(argv: list[str]) -> None:
    """``lightning-sfl attack ARGS``: bad settings end with one line on stderr (exit code 2)."""
    args = parse_args(argv)
    from lightning_sfl.errors import reported_cause

    try:
        import_modules(args.imports)
        m = run_attack(args)
    except Exception as exc:
        cause = reported_cause(exc)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        raise SystemExit(2) from None
    stolen = f", clone accuracy {m['clone_accuracy']:.4f}" if "clone_accuracy" in m else ""
    rounds = f"{m['rounds']} round{'s' * (m['rounds'] != 1)}"
    wandb = f"; {args.wandb_saved}" if getattr(args, "wandb_saved", None) else ""
    if m["attack"] == "labels":
        binary = f"norm AUC {m['norm_auc']:.4f}, direction AUC {m['direction_auc']:.4f}, " if "norm_auc" in m else ""
        print(
            f"labels attack on {m['method']} after {rounds} ({m['dataset']}, the server receives {m['sent']}): "
            f"{binary}clusters {m['cluster_accuracy']:.4f}, known tail "
            + (f"{m['known_tail_accuracy']:.4f}" if "known_tail_accuracy" in m else "(unknown to the server)")
            + ", completion "
            f"{m['completion_accuracy']:.4f}, histogram L1 {m['histogram_l1']:.4f} over {m['rows']} rows; wrote "
            f"{args.written_to}{wandb}"
        )
        return
    print(
        f"{m['attack']} attack on {m['method']} after {rounds} ({m['dataset']}, activations "
        f"{m['activation_shape']}){stolen}: MSE {m['mse']:.4f}, SSIM {m['ssim']:.4f}, PSNR {m['psnr']:.2f} dB over "
        f"{m['test_images']} test images; wrote {args.written_to}"
        + (f"; {args.wandb_saved}" if getattr(args, "wandb_saved", None) else "")
    )
