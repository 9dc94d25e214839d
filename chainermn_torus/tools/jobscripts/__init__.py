"""Batch-job scripts: a ``job.Job`` (what the job asks for), one ``systems.System`` per
system (its node, MPIs, templates and the few methods where it differs), and ``render``
(the common template and values). The command line is ``tools.jobscript``."""
