"""The differential-privacy parts of the victims: `privacy` (accounting, sampling, clipping, the
Gaussian release), `whitebox_canaries` (what a white-box auditor sees) and `bugs` (broken DP
twins, loaded by path). Nothing is imported here: `bugs` imports pipelines, which import `privacy`."""
