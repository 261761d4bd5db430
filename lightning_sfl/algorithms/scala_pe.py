"""SCALA-PE: privacy-enhanced SCALA (SCALA journal §5.7, Table VI), with ResSFL's two mechanisms (Li et al., CVPR 2022,
public code ``zlijingtao/ResSFL``).

Both are defences of every synchronous split method (:mod:`lightning_sfl.defences`: ``Bottleneck`` and
``InversionRegulariser``, where its hooks live); SCALA-PE is SCALA given both by default (``--model.defences``
replaces them: ``[]`` is SCALA).

1. **Bottleneck at the cut** (:class:`~lightning_sfl.defences.Bottleneck`, 8 channels here): the
   client half ends with ``Conv2d(C → 8, 3, stride 1)`` and the server half starts with ``Conv2d(8 → C, 3, stride 1)``
   (:func:`~lightning_sfl.models.add_bottleneck`); activations ``[B, C, H, W]`` become ``[B, 8, H, W]``.
2. **Simulated inversion model** ``w_v,k`` per client (:func:`~lightning_sfl.privacy.inversion.inversion_decoder`,
   16 channels): the client's objective is eq. 17,

   ``f_k(w_c) = l(w_s; h(w_c; D̃_k)) + γ·R(L(w_v,k; h(w_c; D̃_k)), D̃_k)``,

   i.e. on top of the returned ``G_k`` (SCALA, eq. 15) the client backpropagates ``γ·∂R_k/∂w_c`` through its own
   activations (the clients' extra terms; the server never sees ``R``). ``R_k`` on the client's batch
   (:func:`~lightning_sfl.privacy.metrics.regulariser`): ``max(mean SSIM(x̂, x) − τ, 0)`` (ResSFL's hinge,
   ``τ = 0.5``, ``γ = 0.3``; the default) or ``−mean MSE(x̂, x)`` (``regulariser="mse"``). ``x`` is the input
   de-normalised to ``[0, 1]``, ``x̂ = L(w_v,k; A_k)`` with the decoder in eval mode and not updated by this term.
   Alternately (every ``every`` local iterations, before the client steps) each client's decoder takes one
   Adam step (lr ``1e-3``) on ``−mean SSIM`` (or ``mean MSE``) of ``L(w_v,k; A_k.detach())``.

The decoders never leave their clients: not uploaded, not averaged, no bytes in the ledger, no simulated compute time
(the clock charges the client halves' work only). They live, with their BatchNorm statistics and Adam moments, in
checkpointed ``[K, ·]`` tensors of the defence, so resume is exact; the warm-up's own Adam moments live only within
the round of the warm-up (checkpoints are written at round ends).

Where the paper is silent and ResSFL's code decides (followed here, documented):

* ``γ`` and ``R``: the paper gives neither; ResSFL uses ``λ = 0.3`` and the SSIM hinge at 0.5 (``threshold=0``
  gives the plain ``γ·max(SSIM, 0)``).
* The decoder: ResSFL's ``conv_normN0C16`` (Conv+BN+ReLU, two up/conv blocks, Conv+BN+Sigmoid).
* ResSFL keeps its decoders per *slot* of the round (slot ``i`` serves a different sampled client each epoch); here
  each client ``k`` owns one, as eq. 17's ``f_k`` reads. ResSFL's multi-client runs step the decoder every 5 batches
  (``--optimize_computation 5``); the default here steps it at every local iteration (``every=1``, ResSFL's
  single-client cadence; with ``T = 5`` a step every 5 iterations trains a decoder once per round), and
  ``every=5`` gives the multi-client one. Its Adam state is never reset (``"kept"``, the default).
* Where this differs from ResSFL's code: the decoders start from PyTorch's default initialisation, one draw shared by
  every client (ResSFL draws Xavier-uniform weights per decoder); their learning rate stays at ``1e-3`` (ResSFL decays
  it ×0.2 at epochs 60/120/160 of its 200); SSIM pads image borders by reflection (torchmetrics) where ResSFL's
  ``pytorch_ssim`` pads with zeros, so SSIM values on small images are not directly comparable with Table VI's.
* ResSFL pre-trains each decoder before the alternation: 30 epochs of MSE (a fresh Adam, lr ``1e-3``, batch 32) on
  (activation, image) pairs of the current client model. Here (``warmup_epochs=30``,
  ``warmup_batch_size=32``) each client does the same on its own shard at the start of the first round it
  takes part in, against the client half it receives (:class:`~lightning_sfl.loop.warmup.WarmupRounds`; ResSFL's
  clients all take part in the first epoch, where the two coincide; ResSFL uses the *test set* for it, a leak not
  copied). Without it (``0``) the online steps alone leave the decoders weak for long: on digits
  (``configs/digits/scala_pe.yaml``, seed 0) the round's mean SSIM of the simulated reconstructions was 0.01 in round
  1 and first above τ = 0.5 in round 25 (above it in 63 of 100 rounds); with it, 0.38 in round 1 and above 0.5 from
  round 3 (in 94 of 100 rounds).
* τ = 0.5 suits images whose undefended reconstructions score a high SSIM (CIFAR-10: 0.93 in Table VI). On MNIST-5k
  even the 64-channel attacker's SSIM is about 0.5 at an MSE of 0.003 (SSIM's luminance term collapses on near-black
  backgrounds that come back faintly grey), the simulated decoders stay near 0.2-0.3, and the hinge never engages: set
  a lower ``threshold`` there (the privacy study uses 0.1).
* ResSFL computes ``A_k`` for the decoder step with the client half in eval mode; here the step's own activations
  are reused (the same values for halves without BatchNorm or dropout: every model of the zoo but ``resnet18``).

Runs on one process (two would need the decoders' BatchNorm statistics and the per-client SSIM means synchronised).
"""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.scala import SCALA
from lightning_sfl.defences import Bottleneck, Defence, InversionRegulariser

__all__ = ["SCALAPE"]


@register("scala_pe", family="split")
class SCALAPE(SCALA):
    """SCALA-PE (see the module docstring): SCALA whose clients are given, unless ``defences`` says otherwise, a
    bottleneck of 8 channels at the cut and the simulated-inversion regulariser (``γ = 0.3``, ``τ = 0.5``; at
    ``gamma=0`` the decoders are still simulated: SCALA with the bottleneck, in weights and traffic)."""

    supports_tail = False  # its decoders invert the uploads of a two-part split

    @classmethod
    @override
    def default_defences(cls) -> list[Defence]:
        return [Bottleneck(channels=8), InversionRegulariser(gamma=0.3)]
