"""Command-line tools (``chainermn-torus ...``): the command itself (``cli``), batch-job
scripts (``jobscript``), timeline merge and plot (``timeline``), calibration (``calibrate``).
Library code never imports this package."""
