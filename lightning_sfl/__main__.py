"""``python -m lightning_sfl``: the console script ``lightning-sfl`` (:mod:`lightning_sfl.cli`)."""

from lightning_sfl.cli import console_main, without_working_folder

if __name__ == "__main__":
    without_working_folder()
    console_main()
