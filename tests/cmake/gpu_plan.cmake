# The step cost model of the CUDA backend (bench_gpu_train --plan): runs in
# every build, no GPU needed. Fails when the recorded plan is broken (no
# launches, GEMM FLOPs that do not add up to 6N per token, no attention,
# tensor-core flash FLOPs that stray from 14 hs per causal pair,
# non-finite times; in bf16 also conversions in the steady state, or a
# residual stream or residual gradient that is not bf16 only); the
# predicted MFU itself is a benchmark figure, not a threshold.
# The default attention backward is the two-pass one (flash_tc.h: what
# the last GPU run passed): a dQ pass, then dK/dV, three attention
# kernels a layer.
add_test(NAME gpu_plan_124m COMMAND bench_gpu_train --plan 16 1024 bf16)
set_tests_properties(gpu_plan_124m PROPERTIES LABELS unit TIMEOUT 60
                     FAIL_REGULAR_EXPRESSION "flash_tc_dsq"
                     PASS_REGULAR_EXPRESSION "flash_tc_bwd_dkv.*\"flash_bwd\":\"twopass\".*\"predicted_mfu\":0\\.[0-9]+.*\"plan_ok\":true")
# The dS backward (--attn-bwd ds, trainer.attention_backward ds): the fused pass's 14 hs per causal
# pair in two kernels (dK/dV with the dS^T tiles written, then the dQ
# sums).
add_test(NAME gpu_plan_124m_ds COMMAND bench_gpu_train --plan 16 1024 bf16 --attn-bwd ds)
set_tests_properties(gpu_plan_124m_ds PROPERTIES LABELS unit TIMEOUT 60
                     FAIL_REGULAR_EXPRESSION "flash_tc_bwd_dkv"
                     PASS_REGULAR_EXPRESSION "flash_tc_dsq.*\"flash_bwd\":\"ds\".*\"plan_ok\":true")
# Past the dS tiles' cap (1 GiB: B 96 is 1152 heads of 1.1 MB) the dS
# backward runs in two chunks of heads (963 and 189), each its two passes:
# the plan's check counts 24 launches of each a step and the same FLOPs.
add_test(NAME gpu_plan_124m_ds_chunks COMMAND bench_gpu_train --attn-bwd ds --plan 96 1024 bf16)
set_tests_properties(gpu_plan_124m_ds_chunks PROPERTIES LABELS unit TIMEOUT 60
                     FAIL_REGULAR_EXPRESSION "flash_tc_bwd_dkv"
                     PASS_REGULAR_EXPRESSION "flash_tc_bwd_ds +attn.* 24 .*flash_tc_dsq +attn.* 24 .*\"flash_bwd\":\"ds\".*\"plan_ok\":true")
add_test(NAME gpu_plan_124m_tf32 COMMAND bench_gpu_train --plan 8 1024 tf32)
set_tests_properties(gpu_plan_124m_tf32 PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "\"plan_ok\":true")
# An unknown variant name is refused with the list.
add_test(NAME gpu_plan_attn_refused COMMAND bench_gpu_train --plan 16 1024 bf16 --attn-bwd dsq)
set_tests_properties(gpu_plan_attn_refused PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "--attn-bwd .dsq.: one of auto, fused, split, twopass, twopass4, wg, ds, cudnn")
# Long sequences: the flash kernels' FLOPs still follow the causal pairs.
add_test(NAME gpu_plan_124m_t4096 COMMAND bench_gpu_train --plan 2 4096 bf16)
set_tests_properties(gpu_plan_124m_t4096 PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "\"plan_ok\":true")
# The fused attention backward (--attn-bwd fused): one pass at 14 hs
# per causal pair and D per visited tile, its dQ turns zeroed first.
add_test(NAME gpu_plan_124m_fused COMMAND bench_gpu_train --plan 16 1024 bf16 --attn-bwd fused)
set_tests_properties(gpu_plan_124m_fused PROPERTIES LABELS unit TIMEOUT 60
                     FAIL_REGULAR_EXPRESSION "flash_tc_bwd_dkv|flash_tc_dsq"
                     PASS_REGULAR_EXPRESSION "flash_tc_bwd.*\"plan_ok\":true")
# The DDP model (--world, --link): 124M's buckets reduced in bf16 (249 MB a
# step, half the fp32 bytes) at worlds 8, 16 and 64 over NVLink, one line
# each; the goal of 95% scaling efficiency at world 8 and B=16 holds.
add_test(NAME gpu_plan_124m_ddp COMMAND bench_gpu_train --plan 16 1024 bf16 --world 8,16,64
                                        --link nvlink)
set_tests_properties(gpu_plan_124m_ddp PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "\"plan_ok\":true.*\"world\":8,\"link\":\"nvlink\",\"grad_reduce\":\"bf16\",\"buckets\":[0-9]+,\"allreduce_mb_per_step\":249\\.0,.*\"predicted_scaling_efficiency\":(0\\.9[5-9]|1\\.0)[0-9]*}.*\"world\":16,.*\"world\":64,.*predicted_scaling_efficiency")
# cuDNN's attention (--attn-fwd cudnn --attn-bwd cudnn) is named in the line: what
# tests/gpu/acceptance.sh reads to run its cudnn phase. Its kernels are
# not modelled: priced as the default (the two passes, the m16 forward).
add_test(NAME gpu_plan_124m_cudnn COMMAND bench_gpu_train --plan 16 1024 bf16 --attn-fwd cudnn
                                          --attn-bwd cudnn)
set_tests_properties(gpu_plan_124m_cudnn PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "flash_tc_bwd_dkv.*\"flash_bwd\":\"cudnn\",\"flash_fwd\":\"cudnn\".*\"plan_ok\":true")
