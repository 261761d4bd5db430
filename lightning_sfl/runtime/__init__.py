"""The runtime every method runs on (:mod:`lightning_sfl.algorithms` holds the methods and their registry only): the
halves and the split's shape (:mod:`~lightning_sfl.runtime.shape`), the clients' copies (the banks, sequential or
stacked: :mod:`~lightning_sfl.runtime.client_bank`, :mod:`~lightning_sfl.runtime.stacked_bank`), the iterations written
once (:mod:`~lightning_sfl.runtime.iteration`, :mod:`~lightning_sfl.runtime.u_shape`), the aggregation, the declared
state and its checkpoint entry, the evaluation, the round's bookkeeping, the guards and the processes' sums.

Importing this package imports none of its modules."""
