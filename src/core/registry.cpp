// Every module of the product, in a fixed order. Subcommands whose module is not built yet are
// listed so `gpubench list` and `--help` show the whole product; calling one says so (exit 2).
#include <CLI/CLI.hpp>

#include "gpubench/core/module.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {

std::optional<std::string> Module::unsupported(const System&, const std::vector<int>& gpus) const {
  if (gpus.empty()) return std::string("no GPU selected");
  return std::nullopt;
}

ModulePtr make_env_module();
ModulePtr make_bandwidth_module();
ModulePtr make_allreduce_module();
ModulePtr make_matmul_module();
ModulePtr make_seqlen_module();
ModulePtr make_tp_module();

namespace {

class PlannedModule final : public Module {
 public:
  PlannedModule(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}
  std::string name() const override { return name_; }
  std::string help() const override { return help_; }
  bool available() const override { return false; }
  void add_options(CLI::App&) override {}
  std::optional<std::string> unsupported(const System&, const std::vector<int>&) const override {
    return "not available yet";
  }
  nlohmann::ordered_json config() const override { return nlohmann::ordered_json::object(); }
  Report run(Context&) override { throw std::logic_error(name_ + " is not available yet"); }

 private:
  std::string name_, help_;
};

}  // namespace

std::vector<ModulePtr> make_modules() {
  std::vector<ModulePtr> m;
  m.push_back(make_env_module());
  m.push_back(make_bandwidth_module());
  m.push_back(make_allreduce_module());
  m.push_back(make_matmul_module());
  m.push_back(make_seqlen_module());
  m.push_back(make_tp_module());
  m.push_back(std::make_unique<PlannedModule>(
      "pp", "Pipeline-parallel transformer: bubbles, schedules, layouts"));
  return m;
}

}  // namespace gpubench
