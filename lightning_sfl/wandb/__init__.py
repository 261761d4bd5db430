"""Weights & Biases, all in one package (nothing is imported here: W&B's worker process starts from
:mod:`lightning_sfl.wandb.worker` without loading Lightning):

* :mod:`lightning_sfl.wandb.logger`: ``WandbLogger``, the CLI's logger: Lightning's, with its calls made by a worker
  process;
* :mod:`lightning_sfl.wandb.process`: the training process's end of that worker process; W&B's mode switches;
* :mod:`lightning_sfl.wandb.worker`: the worker process itself (it makes the calls, in order);
* :mod:`lightning_sfl.wandb.online`: whether an online run can start here (else it logs offline, said in one line);
* :mod:`lightning_sfl.wandb.payloads`: tables, charts and images built in the worker process (per-class accuracy, the
  partition heatmap);
* :mod:`lightning_sfl.wandb.offline`: reading an offline run back with W&B's own reader (tests, figures, sweeps).
"""
