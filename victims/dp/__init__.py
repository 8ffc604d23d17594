"""The differential-privacy parts of the victims: `privacy` (the accountants, Poisson batches,
per-example clipping and the Gaussian release every DP victim shares), `whitebox_canaries` (what
a white-box auditor sees of each canary in those releases) and `bugs` (deliberately broken DP
victims, each a built-in pipeline's twin differing in one place, loaded by path:
`--victim victims.dp.bugs:Class`). Nothing is imported here: `bugs` imports pipelines, which
import `privacy`."""
