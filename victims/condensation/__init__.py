"""The dataset-condensation parts of the victims: `condense` (what `dm`, `dc`, `dsa` and `kip` share),
`augment` (DSA) and `matching` (the layer-wise gradient distance). Nothing is imported here."""
