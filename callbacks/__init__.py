"""Lightning callbacks of lightning_sfl, installed as ``lightning_sfl.callbacks``."""

__all__: list[str] = []
