"""Measured energy: power meter backends, their recordings, and alignment with the op trace.

base        the sample stream (Recording), its checks and CSV file, the Meter protocol
align       recording x op events -> joules per op (and per trace record, for accounting)
measure     a recording against a saved trace (`poet report --meter`): placement, markers, gaps, header
window      Zeus-style begin_window / end_window over any meter
sampler     polling for the sysfs meters
ppk2, joulescope, ina219, ina3221, rapl   one backend each
synthetic   a known op timeline and the recording a meter would make of it (tests, benchmark)
"""
