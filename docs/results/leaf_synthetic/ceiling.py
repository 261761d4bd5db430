"""The experiment behind the FedLC Synthetic study's ordering across (λ, µ) (docs/results/papers.md): is
Synthetic(1,1) harder than Synthetic(0,0) for the model every method trains, on the data FedProx's generator draws?

For each setting and seed of the study (the data seed = the run seed), it draws the same 100 clients the study's
runs see, and reports:

- the **ceiling**: multinomial logistic regression (the study's model, 60 -> 10) fitted on the pooled training rows
  of all clients (scikit-learn, lbfgs, C = ∞: no penalty), accuracy on the pooled test rows: what a perfect federated
  optimiser of this model could reach;
- the **label skew** of the clients: distinct classes per client and the share of its top class (means over clients).

Run (from the repository root, with the package installed; ~1 min):
    python docs/results/leaf_synthetic/ceiling.py > docs/results/leaf_synthetic/ceiling.md
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from lightning_sfl.data.leaf_synthetic import fedprox_synthetic

SETTINGS = [(0.0, 0.0), (0.5, 0.5), (1.0, 1.0)]
SEEDS = [0, 1, 2, 3, 4]


def one(lam: float, mu: float, seed: int) -> tuple[float, float, float]:
    """Ceiling accuracy, mean distinct classes per client, mean top-class share, for one draw."""
    data = fedprox_synthetic(lam, mu, seed=seed)
    x, y = np.concatenate(data.train_x), np.concatenate(data.train_y)
    with warnings.catch_warnings():  # lbfgs at max_iter on a separable-ish problem: the fit is still the ceiling
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LogisticRegression(C=np.inf, max_iter=2000).fit(x, y)
    acc = float((model.predict(np.concatenate(data.test_x)) == np.concatenate(data.test_y)).mean())
    labels = [np.concatenate([a, b]) for a, b in zip(data.train_y, data.test_y, strict=True)]
    classes = float(np.mean([len(np.unique(lab)) for lab in labels]))
    top = float(np.mean([np.bincount(lab).max() / len(lab) for lab in labels]))
    return acc, classes, top


def main() -> None:
    print("| Synthetic(λ, µ) | ceiling acc (%) per seed 0-4 | mean ± std | classes per client | top-class share |")
    print("|---|---|---|---|---|")
    for lam, mu in SETTINGS:
        rows = np.array([one(lam, mu, s) for s in SEEDS])
        accs = " / ".join(f"{100 * a:.1f}" for a in rows[:, 0])
        mean, std = 100 * rows[:, 0].mean(), 100 * rows[:, 0].std(ddof=1)
        skew = f"{rows[:, 1].mean():.2f} | {rows[:, 2].mean():.2f}"
        print(f"| ({lam:g}, {mu:g}) | {accs} | {mean:.2f} ± {std:.2f} | {skew} |")


if __name__ == "__main__":
    main()
