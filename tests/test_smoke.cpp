// Smoke checks of the tensor view and enum helpers.
#include <gtest/gtest.h>

#include "gdn/ops.h"

TEST(TensorView, DescribeAndContiguity) {
  float buf[24];
  gdn::TensorView v = gdn::make_view(buf, gdn::DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(v.describe(), "float32 [2, 3, 4]");
  EXPECT_TRUE(v.contiguous());
  v.stride[0] = 20;  // padded rows
  EXPECT_FALSE(v.contiguous());
  EXPECT_TRUE(v.inner_contiguous());
  gdn::TensorView absent;
  EXPECT_FALSE(absent.present());
  EXPECT_EQ(absent.describe(), "absent");
}

TEST(Enums, ParseRejectsUnknown) {
  gdn::Activation a;
  EXPECT_TRUE(gdn::parse_activation("silu", &a).ok());
  EXPECT_EQ(a, gdn::Activation::kSilu);
  gdn::Status s = gdn::parse_activation("gelu", &a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gelu"), std::string::npos);
  gdn::SpecConvLayout l;
  EXPECT_FALSE(gdn::parse_spec_conv_layout("ring", &l).ok());
  gdn::StateLayout sl;
  EXPECT_TRUE(gdn::parse_state_layout("kv", &sl).ok());
  EXPECT_EQ(sl, gdn::StateLayout::kKV);
}
