// The built binary with bad inputs: each gets one clear line on stderr and a documented exit
// code (2 bad input, 3 no GPU), never a crash, a hang or a half-written report.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_run.hpp"

namespace {

using namespace gpubench::cli_test;

TEST(Cli, VersionNamesTheCommit) {
  const auto o = run("--version");
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("gpubench 0.1.0+"), std::string::npos) << o.out;
}

TEST(Cli, HelpListsEverySubcommand) {
  const auto o = run("--help");
  EXPECT_EQ(o.code, 0);
  for (const char* s :
       {"env", "bandwidth", "allreduce", "matmul", "seqlen", "tp", "pp", "compare", "list", "all"})
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
}

TEST(Cli, UnknownSubcommand) {
  expect_bad_input(run("frobnicate"), "frobnicate");
}
TEST(Cli, NoSubcommand) {
  expect_bad_input(run(""), "subcommand");
}
TEST(Cli, UnknownOption) {
  expect_bad_input(run("env --frobnicate"), "frobnicate");
}
TEST(Cli, BadLogLevel) {
  expect_bad_input(run("env --log-level loud"), "loud");
}
TEST(Cli, BadL2Policy) {
  expect_bad_input(run("bandwidth --l2 tepid"), "tepid");
}
TEST(Cli, NegativeIters) {
  expect_bad_input(run("bandwidth --iters -3"), "iters");
}
TEST(Cli, PpBadInput) {
  expect_bad_input(run("pp --pp 3 --layers 2"), "--pp: 3 stages need at least 3 layers");
  expect_bad_input(run("pp --microbatches 3"), "--microbatches: 3 does not divide --batch 16");
  expect_bad_input(run("pp --schedule zigzag"), "--schedule");
  expect_bad_input(run("pp --pp 2 --schedule interleaved --chunks 3"), "--chunks");
  expect_bad_input(run("pp --workload sideways"), "--workload: 'sideways'");
  expect_bad_input(run("pp --timeout 0"), "--timeout must be greater than 0 seconds");
  expect_bad_input(run("pp --nccl-ctas 100"), "--nccl-ctas: 100 is outside 0..64");
  expect_bad_input(run("pp --stage-split quarter"), "--stage-split: 'quarter'");
  expect_bad_input(run("pp --model no-such-model"), "no-such-model");
}

TEST(Cli, DpBadInput) {
  expect_bad_input(run("dp --strategy zero3"), "--strategy: 'zero3'");
  expect_bad_input(run("dp --bucket-size 10KB"), "--bucket-size");
  expect_bad_input(run("dp --bucket-sweep 5MB,x"), "--bucket-sweep");
  expect_bad_input(run("dp --seq-len -2"), "--seq-len");
  expect_bad_input(run("dp --batch-sizes 0"), "--batch-sizes");
}

TEST(Cli, TpBadInput) {
  expect_bad_input(run("tp --tp 3"), "--tp: 3 does not divide llama-2-7b's 32 attention heads");
  expect_bad_input(run("tp --tp 0"), "--tp: 0 must be at least 1");
  expect_bad_input(run("tp --model no-such-model"), "no-such-model");
  expect_bad_input(run("tp --micro diagonal"), "--micro");
  expect_bad_input(run("tp --seq-lens 0"), "--seq-lens");
  expect_bad_input(run("tp --dtype fp8"), "--dtype");
  expect_bad_input(run("tp --collectives mpi"), "--collectives: 'mpi' is not nccl or copy-engine");
  expect_bad_input(run("tp --small-collectives mpi"),
                   "--small-collectives: 'mpi' is not auto, nccl or one-shot");
  expect_bad_input(run("tp --overlap --overlap-chunks 17"),
                   "--overlap-chunks: 17 is outside 1..16");
}

// --layouts is checked here but for its GPU count (run() knows it), also in `all`'s config:
// before env or any other module runs.
TEST(Cli, AdviseBadLayouts) {
  expect_bad_input(run("advise --layouts tp=3"), "--layouts: 'tp=3'");
  expect_bad_input(run("advise --layouts tp=4,pp=2"), "a run has one count");
  const auto p = write_config("bad_layouts.ini", "[advise]\nlayouts = tp4\n");
  expect_bad_input(run("all --config " + p.string()), "--layouts: 'tp4' is not name=value");
  expect_bad_input(run("pp --layouts dp=2xdp=2"), "--layouts: dp appears twice");
}

TEST(Cli, SeqlenBadInput) {
  expect_bad_input(run("seqlen --model no-such-model"), "no-such-model");
  expect_bad_input(run("seqlen --model-config /nonexistent/config.json"), "config.json");
  expect_bad_input(run("seqlen --seq-lens 0"), "--seq-lens");
  expect_bad_input(run("seqlen --seq-lens 512,abc"), "--seq-lens");
  expect_bad_input(run("seqlen --batch-sizes 1:8:x1"), "--batch-sizes");
  expect_bad_input(run("seqlen --dtype fp8_e4m3"), "--dtype");
  expect_bad_input(run("seqlen --layers 33"), "--layers");
  expect_bad_input(run("seqlen --attention flash"), "--attention");
  expect_bad_input(run("seqlen --model llama-2-7b --seq-lens 8192"), "--force-length");
  expect_bad_input(run("seqlen --model opt-125m --seq-lens 4096"), "learned position");
}

TEST(Cli, SeqlenIncompleteModelConfig) {
  const auto p = write_config("config.json", R"({"model_type": "llama", "hidden_size": 4096})");
  expect_bad_input(run("seqlen --model-config " + p.string()), "config.json");
  const auto h = write_config("bad_heads.json", R"({"model_type": "llama", "hidden_size": 4100,
    "intermediate_size": 11008, "num_hidden_layers": 2, "num_attention_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096})");
  expect_bad_input(run("seqlen --model-config " + h.string()), "bad_heads.json");
}

TEST(Cli, UnmodelledModelConfigIsRefusedBeforeTheGpuCheck) {
  // A Mixtral-style config would otherwise be timed as a dense model. Every subcommand that reads
  // --model-config refuses it as bad input, also on a machine without a GPU (hidden here).
  const auto mixtral = write_config("mixtral.json", R"({"model_type": "mixtral",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "hidden_act": "silu", "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": null, "num_local_experts": 8,
    "num_experts_per_tok": 2})");
  for (const std::string module : {"seqlen", "tp", "pp", "matmul", "dp"}) {
    SCOPED_TRACE(module);
    expect_bad_input(
        run(module + " --no-files --model-config " + mixtral.string(), "CUDA_VISIBLE_DEVICES="),
        "mixtral.json': 'num_local_experts' 8: mixture-of-experts models");
  }
  const auto gemma2 = write_config("gemma2.json", R"({"model_type": "gemma2",
    "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192, "hidden_activation": "gelu_pytorch_tanh",
    "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
    "query_pre_attn_scalar": 256})");
  expect_bad_input(
      run("seqlen --no-files --model-config " + gemma2.string(), "CUDA_VISIBLE_DEVICES="),
      "'attn_logit_softcapping' 50.0");
}

TEST(Cli, MatmulBadInput) {
  expect_bad_input(run("matmul --dtypes bf16,fp4"), "fp4");
  expect_bad_input(run("matmul --shapes 4096x4096"), "--shapes");
  expect_bad_input(run("matmul --shapes 0x4096x4096"), "greater than 0");
  expect_bad_input(run("matmul --sizes 1024,abc"), "--sizes");
  expect_bad_input(run("matmul --dtypes fp8_e4m3 --shapes 4096x4096x4100"), "multiples of 16");
  expect_bad_input(run("matmul --dtypes int8 --layout nn"), "TN");
  expect_bad_input(run("matmul --layout xx"), "--layout");
  expect_bad_input(run("matmul --model no-such-model"), "no-such-model");
  expect_bad_input(run("matmul --model llama-2-7b --tokens 0"), "--tokens");
  expect_bad_input(run("matmul --algos 0"), "--algos");
  expect_bad_input(run("matmul --sustained -1"), "--sustained");
}

TEST(Cli, MatmulShapeTooLargeForMemory) {
  // 1M^3 in bf16 needs 6 TB: bad input on a GPU machine, no GPU (3) elsewhere.
  const auto o = run("matmul --dtypes bf16 --shapes 1048576x1048576x1048576 --no-files");
  if (has_gpu()) {
    expect_bad_input(o, "GPU memory");
  } else {
    EXPECT_EQ(o.code, 3) << o.err;
  }
}

TEST(Cli, ListShowsEveryModule) {
  const auto o = run("list");
  EXPECT_EQ(o.code, 0) << o.err;
  for (const char* s : {"env", "bandwidth", "allreduce", "matmul", "seqlen", "tp", "pp", "compare"})
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
}

TEST(Cli, BadSizes) {
  expect_bad_input(run("bandwidth --hbm-size 0"), "hbm-size");
  expect_bad_input(run("bandwidth --hbm-size -4M"), "hbm-size");
  expect_bad_input(run("bandwidth --hbm-size 12Q"), "hbm-size");
  expect_bad_input(run("bandwidth --p2p-size lots"), "p2p-size");
}

TEST(Cli, UnknownBandwidthTest) {
  expect_bad_input(run("bandwidth --tests hbm,warp"), "warp");
}

TEST(Cli, MissingConfig) {
  expect_bad_input(run("all --config /nonexistent/gpubench.ini"), "cannot read");
}

TEST(Cli, MalformedConfig) {
  const auto p = write_config("malformed.ini", "[bandwidth]\nthis line has no equals sign\n");
  expect_bad_input(run("all --config " + p.string()), "malformed.ini:2");
}

TEST(Cli, UnknownConfigKey) {
  const auto p = write_config("unknown_key.ini", "[bandwidth]\nhbm-sise = 1G\n");
  expect_bad_input(run("all --config " + p.string()), "unknown key 'hbm-sise'");
}

TEST(Cli, UnknownConfigSection) {
  const auto p = write_config("unknown_section.ini", "[bandwith]\nhbm-size = 1G\n");
  expect_bad_input(run("all --config " + p.string()), "unknown section [bandwith]");
}

TEST(Cli, BadValueInConfig) {
  const auto p = write_config("bad_value.ini", "[bandwidth]\nhbm-size = 0\n");
  expect_bad_input(run("bandwidth --config " + p.string()), "hbm-size");
}

TEST(Cli, UnreadableConfigIsAFolder) {
  expect_bad_input(run("all --config " + scratch().string()), "cannot read");
}

TEST(Cli, UnwritableOutputDir) {
  const auto file = write_config("not_a_folder.txt", "x");
  expect_bad_input(run("env --output-dir " + (file / "sub").string()), "--output-dir");
}

TEST(Cli, GpuIndexThatDoesNotExist) {
  const auto o = run("bandwidth --gpus 97");
  if (has_gpu()) {
    expect_bad_input(o, "GPU 97 does not exist");
  } else {
    EXPECT_EQ(o.code, 3) << o.err;  // no GPU at all: exit 3 says what was found
    EXPECT_EQ(lines(o.err), 1) << o.err;
  }
}

// The list's syntax is input, checked before any GPU is looked for: bad input (2) with or
// without a GPU.
TEST(Cli, RepeatedGpuIndex) {
  expect_bad_input(run("bandwidth --gpus 0,0"), "listed twice");
  expect_bad_input(run("allreduce --gpus 1,0-1"), "listed twice");
}

TEST(Cli, MalformedGpuList) {
  expect_bad_input(run("bandwidth --gpus zero"), "not a GPU index");
  expect_bad_input(run("all --gpus 3-1"), "reversed");
  expect_bad_input(run("matmul --gpus 5000"), "beyond any machine");
}

TEST(Cli, NoGpuExitsThree) {
  // Hiding every GPU is the same as a machine without one, with or without a driver.
  const auto o = run("bandwidth --quick --no-files", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
  EXPECT_NE(o.err.find("no usable GPU"), std::string::npos) << o.err;
}

TEST(Cli, EnvRunsWithoutAGpuAndWritesAReport) {
  const auto dir = scratch() / "env_report";
  const auto o = run("env --output-dir " + dir.string(), "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "env.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "env.md"));
  const std::string json = slurp(dir / "env.json");
  EXPECT_NE(json.find("\"schema\": \"gpubench.result/1\""), std::string::npos);
  EXPECT_NE(o.out.find("report: " + dir.string()), std::string::npos) << o.out;
}

TEST(Cli, JsonToStdoutIsPureJson) {
  const auto o = run("env --json - --no-files", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(o.code, 0) << o.err;
  ASSERT_FALSE(o.out.empty());
  EXPECT_EQ(o.out.front(), '{') << o.out.substr(0, 200);
  EXPECT_NE(o.out.find("\"module\": \"env\""), std::string::npos);
}

// Under mpirun a module without a process-per-GPU form runs in rank 0 alone, and says so; the
// other ranks exit 0 without output.
TEST(Cli, AModuleOfOneProcessUnderMpirunSaysItRanOnRankZero) {
  const std::string launch = "CUDA_VISIBLE_DEVICES= OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=";
  const auto lead = run("env --json - --no-files", launch + "0");
  EXPECT_EQ(lead.code, 0) << lead.err;
  EXPECT_NE(lead.out.find("env has no process-per-GPU form: under mpirun (4 processes) it ran "
                          "in rank 0 alone"),
            std::string::npos)
      << lead.out.substr(0, 2000);
  const auto other = run("env --json - --no-files", launch + "3");
  EXPECT_EQ(other.code, 0) << other.err;
  EXPECT_TRUE(other.out.empty()) << other.out.substr(0, 200);
}

TEST(Cli, AllWithoutGpuRunsEnvAndExitsThree) {
  const auto dir = scratch() / "all_nogpu";
  const auto p =
      write_config("quick_ok.ini", "[common]\nquick = true\n[bandwidth]\nhbm-size = 64M\n");
  const auto o =
      run("all --config " + p.string() + " --output-dir " + dir.string(), "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "env.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "summary.md"));
  EXPECT_NE(o.out.find("failed: bandwidth"), std::string::npos) << o.out;
}

TEST(Cli, ShippedConfigsParse) {
  // The shipped configs must be valid: a dry parse through `all` on a machine without GPUs
  // still rejects a bad key or section with exit 2, so anything else means they parsed.
  for (const char* name : {"config/default.ini", "config/quick.ini"}) {
    const auto o = run(std::string("all --no-files --config ") + source_dir() + "/" + name,
                       "CUDA_VISIBLE_DEVICES=");
    EXPECT_NE(o.code, 2) << name << ": " << o.err;
  }
}

}  // namespace
