"""The dataset-condensation parts of the victims: `condense` (what the condensation victims `dm`,
`dc`, `dsa` and `kip` share: their base class, the members per class, the initial set, the
images' optimiser), `augment` (differentiable siamese augmentation, DSA) and `matching` (the
layer-wise gradient distance of DC, DSA and PSG). Nothing is imported here."""
