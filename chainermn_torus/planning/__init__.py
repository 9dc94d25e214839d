"""Choosing a communicator and grid: the alpha-beta cost model and its presets
(``planner``) and the measurement of a network's figures (``calibrate``)."""
