"""The machinery the strategies share: milp (solving a MILP with HiGHS or another solver), bound
(the relaxations), race (the second core), clock (time limits), resident_sets (the resident-set walk)."""
