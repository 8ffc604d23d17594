import torch

from victims.nets import ConvNet, MLP, NetConfig, build_net, default_conv_depth, without_inplace
from victims.train import n_queries, query_views, shift


def test_convnet_depth_follows_the_image_size():
    # 32 px -> 3 blocks (4x4 features, as in the seeds); 28 -> 3; 8 -> 2 (2x2).
    assert [default_conv_depth(s, s) for s in (32, 28, 8, 4, 2)] == [3, 3, 2, 1, 1]
    net = build_net(NetConfig(width=8), image_shape=(1, 8, 8), n_classes=10)
    assert isinstance(net, ConvNet) and net.embed_dim == 8 * 2 * 2
    assert net(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    # One-channel 28x28 (MNIST): the first convolution pads 3, as the DatasetCondensation ConvNet
    # does, so the blocks see 32 -> 16 -> 8 -> 4 px: 4x4 features, not 3x3; RGB 28x28 pads 1.
    mnist = build_net(NetConfig(width=8), image_shape=(1, 28, 28), n_classes=10)
    assert mnist.features[0].padding == (3, 3) and mnist.features[4].padding == (1, 1)
    assert mnist.embed_dim == 8 * 4 * 4 and mnist(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert build_net(NetConfig(width=8), image_shape=(3, 28, 28), n_classes=10).embed_dim == 8 * 3 * 3
    mlp = build_net(NetConfig(arch="mlp", width=12), image_shape=(3, 4, 4), n_classes=3)
    assert isinstance(mlp, MLP) and mlp(torch.zeros(2, 3, 4, 4)).shape == (2, 3)


def test_relu_is_in_place_only_after_a_norm_and_gives_the_same_values_out_of_place():
    relus = lambda net: [m.inplace for m in net.modules() if isinstance(m, torch.nn.ReLU)]  # noqa: E731
    normed = build_net(NetConfig(width=8), image_shape=(1, 8, 8), n_classes=10)
    # after GroupNorm the activation is nobody else's; without a norm it is the convolution's
    # output, which per-example gradients read (victims.dp.privacy checks its version)
    assert relus(normed) == [True, True]
    assert relus(build_net(NetConfig(width=8, norm="none"), image_shape=(1, 8, 8), n_classes=10)) == [False, False]
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    before = normed(x)
    assert relus(without_inplace(normed)) == [False, False]
    assert torch.equal(normed(x), before)


def test_shift_moves_pixels_with_reflect_padding():
    x = torch.arange(9.0).view(1, 1, 3, 3)  # rows (0 1 2) (3 4 5) (6 7 8)
    down = shift(x, 1, 0)
    # Row r of the result is row r-1 of the input; the new top row reflects row 1.
    assert down[0, 0].tolist() == [[3, 4, 5], [0, 1, 2], [3, 4, 5]]
    right = shift(x, 0, 1)
    assert right[0, 0].tolist() == [[1, 0, 1], [4, 3, 4], [7, 6, 7]]
    assert torch.equal(shift(x, 0, 0), x)


def test_query_views_start_with_the_image_and_mirror_only_when_allowed():
    x = torch.rand(2, 3, 6, 6)
    plain, mirrored = query_views(x, flip_ok=False), query_views(x, flip_ok=True)
    assert len(plain) == n_queries(flip_ok=False) == 5 and len(mirrored) == n_queries(flip_ok=True) == 10
    assert torch.equal(plain[0], x) and torch.equal(mirrored[5], x.flip(-1))
