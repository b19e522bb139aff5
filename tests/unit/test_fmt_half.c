/*
 * Unit test of engine/fmt's float16 / bfloat16 conversions (fmt_out.c),
 * which the GGUF writer and reader use: every one of the 65536 halves and
 * bfloat16 values widens exactly and narrows back to itself (NaNs stay
 * NaN), and narrowing rounds to nearest even at the edges (ties, the
 * largest finite half, overflow to infinity, subnormals, underflow).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fmt_out.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_half_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gpt_fmt_f16_to_f32((uint16_t)h);
        uint16_t back = gpt_fmt_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN */
            assert_true(isnan(f));
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            continue;
        }
        assert_int_equal(back, h);
    }
    assert_true(gpt_fmt_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(gpt_fmt_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(isinf(gpt_fmt_f16_to_f32(0xfc00)) && gpt_fmt_f16_to_f32(0xfc00) < 0);
}

static void test_half_rounding(void **state)
{
    (void)state;
    assert_int_equal(gpt_fmt_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(gpt_fmt_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(gpt_fmt_f32_to_f16(-0.0f), 0x8000);
    /* ties between 1 and 1 + 2^-10 go to the even one */
    assert_int_equal(gpt_fmt_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(gpt_fmt_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    assert_int_equal(gpt_fmt_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    assert_int_equal(gpt_fmt_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(gpt_fmt_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(gpt_fmt_f32_to_f16(1e30f), 0x7c00);
    assert_int_equal(gpt_fmt_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(gpt_fmt_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(gpt_fmt_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);    /* tie to even: 0 */
    assert_int_equal(gpt_fmt_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);    /* tie to even: 2 */
    assert_int_equal(gpt_fmt_f32_to_f16(ldexpf(1023.0f, -24)), 0x03ff); /* largest subnormal */
    assert_int_equal(gpt_fmt_f32_to_f16(ldexpf(2047.0f, -25)), 0x0400); /* rounds up to normal */
    assert_int_equal(gpt_fmt_f32_to_f16(1e-40f), 0x0000);
    assert_true(isnan(gpt_fmt_f16_to_f32(gpt_fmt_f32_to_f16(NAN))));
}

static void test_bf16(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gpt_fmt_bf16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true(isnan(gpt_fmt_bf16_to_f32(gpt_fmt_f32_to_bf16(f))));
            continue;
        }
        assert_int_equal(gpt_fmt_f32_to_bf16(f), h);
    }
    assert_int_equal(gpt_fmt_f32_to_bf16(from_bits(0x3f808000)), 0x3f80); /* tie: even */
    assert_int_equal(gpt_fmt_f32_to_bf16(from_bits(0x3f818000)), 0x3f82); /* tie: even */
    assert_int_equal(gpt_fmt_f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
    assert_int_equal(gpt_fmt_f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80); /* overflow: inf */
    assert_true(isnan(gpt_fmt_bf16_to_f32(gpt_fmt_f32_to_bf16(from_bits(0x7f800001)))));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_round_trip),
        cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
