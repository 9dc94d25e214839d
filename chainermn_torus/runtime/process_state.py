"""A process's state as the kernel shows it, in one letter: what the watchdog's verdict
(``verdict``) reads beside the board."""
import psutil

__all__ = ['process_state']

# psutil's names -> one letter (``verdict.SAID`` says what each means).
_STATES = {psutil.STATUS_RUNNING: 'R', psutil.STATUS_SLEEPING: 'S',
           psutil.STATUS_DISK_SLEEP: 'D', psutil.STATUS_STOPPED: 'T',
           psutil.STATUS_TRACING_STOP: 'T', psutil.STATUS_ZOMBIE: 'Z', psutil.STATUS_DEAD: 'Z'}


def process_state(pid):
    """R, S, D, T, Z, X (no such process) or ? (not readable), as /proc shows ``pid``."""
    try:
        return _STATES.get(psutil.Process(pid).status(), 'S')
    except psutil.NoSuchProcess:
        return 'X'
    except psutil.Error:
        return '?'
