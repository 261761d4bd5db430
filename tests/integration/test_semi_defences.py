"""Semi-SFL takes the clients' defences through its shape, as every split method does: both uploads (the students'
strong view, the teachers' weak view) leave the clients defended, NoPeek correlates the students' uploads with the
view they computed on, a bottleneck is the teacher's too, and what cannot apply (label defences, the inversion
regulariser's warm-up, any defence of a whole-model method) is refused in one line."""

from __future__ import annotations

import pytest
import torch
from _helpers import flat_params
from test_semi_sfl import _fit

from lightning_sfl.algorithms import FedSwitch, SemiFL, SemiSFL
from lightning_sfl.defences import (
    ActivationNoise,
    Bottleneck,
    GradientNoise,
    InversionRegulariser,
    NoPeek,
    RandomisedLabels,
)
from lightning_sfl.errors import ConfigError


class Recorded(SemiSFL):
    """Semi-SFL that keeps, per unlabelled step, what its teachers uploaded and what they computed before the
    defences (the teachers' bank on the weak view, recomputed here, before the teachers follow their students)."""

    def upload_views(self, step):
        acts = super().upload_views(step)
        with torch.no_grad():
            computed = self.client_banks["teacher"](step.views.weak, step.local_sizes, step.slots)
        self.__dict__.setdefault("uploads", []).append((computed, step.teacher_acts.detach().clone()))
        return acts


def test_a_zero_defence_is_the_undefended_run_bitwise():
    plain, _ = _fit(1)
    zero, _ = _fit(1, defences=[NoPeek(weight=0.0), ActivationNoise(scale=0.0)])
    assert torch.equal(flat_params(plain), flat_params(zero))


def test_both_uploads_leave_the_clients_defended():
    model, _ = _fit(1, cls=Recorded, defences=[ActivationNoise(scale=0.0, bound="tanh")])
    assert model.uploads
    for computed, sent in model.uploads:  # the teachers' upload is bounded as the students' is: tanh of their own
        assert torch.allclose(sent, torch.tanh(computed), atol=1e-6) and not torch.allclose(sent, computed)
    noisy, _ = _fit(1, cls=Recorded, defences=[ActivationNoise(scale=0.5, bound="tanh")])
    spread = torch.cat([(sent - torch.tanh(computed)).flatten() for computed, sent in noisy.uploads])
    assert 0.5 < spread.abs().mean() / 0.5 < 1.5  # Laplace(b = 0.5): E|noise| = b


def test_nopeek_trains_semi_sfl_clients_on_the_view_they_compute_on():
    plain, _ = _fit(1)
    defended, trainer = _fit(1, defences=[NoPeek(weight=5.0)])
    assert "train/nopeek_dcor" in trainer.logged_metrics
    assert 0 < float(trainer.logged_metrics["train/nopeek_dcor"]) <= 1
    assert not torch.equal(flat_params(plain.client), flat_params(defended.client))


def test_a_bottleneck_is_the_teachers_too():
    model = SemiSFL(defences=[Bottleneck(channels=3)])
    x = torch.zeros(2, *model.hparams.input_shape)
    assert model.client(x).shape[1] == 3 and model.teacher_client(x).shape[1] == 3
    assert model(x).shape == (2, model.num_classes)


@pytest.mark.parametrize(
    ("cls", "defence", "message"),
    [
        (SemiSFL, RandomisedLabels(epsilon=1.0), "RandomisedLabels defends the clients' labels; SemiSFL's have none"),
        (SemiSFL, GradientNoise(scale=0.1), "GradientNoise defends what U-shaped clients send up: give tail_point"),
        (SemiSFL, InversionRegulariser(gamma=0.5), "InversionRegulariser needs synchronous rounds; SemiSFL runs"),
        (SemiFL, NoPeek(weight=1.0), "SemiFL's clients train the whole model: no activations cross a cut"),
        (FedSwitch, ActivationNoise(scale=0.1), "FedSwitch's clients train the whole model: no activations cross"),
    ],
)
def test_what_cannot_apply_is_refused_in_one_line(cls, defence, message):
    with pytest.raises(ConfigError, match="^[^\n]*$") as err:
        cls(defences=[defence])
    assert message in str(err.value)
