"""A stand-in for the published WTConv2d before its stride fix (BGU-CS-VIL/WTConv at f867135 and earlier, MIT
licence, ``wtconv/wtconv2d.py``): the same class name, constructor, parameters and arithmetic as today's
(tests/published_wtconv.py) except that stride > 1 is a parameter ``stride_filter`` of ones, applied by a lambda
with a strided 1x1 depthwise convolution, statement for statement as published; commit 386cb3a replaced it with
AvgPool2d(1, stride). tests/test_published_versions.py checks it against the published code at that commit when a
checkout is in third_party/WTConv.
"""

import published_wtconv
import torch
import torch.nn as nn
import torch.nn.functional as F


class WTConv2d(published_wtconv.WTConv2d):
    def __init__(self, in_channels, out_channels, kernel_size=5, stride=1, bias=True, wt_levels=1, wt_type="db1"):
        super().__init__(in_channels, out_channels, kernel_size, stride, bias, wt_levels, wt_type)
        del self.do_stride  # today's AvgPool2d; the version before the fix holds a function or None instead

        if self.stride > 1:
            self.stride_filter = nn.Parameter(torch.ones(in_channels, 1, 1, 1), requires_grad=False)
            self.do_stride = lambda x_in: F.conv2d(
                x_in, self.stride_filter, bias=None, stride=self.stride, groups=in_channels
            )
        else:
            self.do_stride = None
