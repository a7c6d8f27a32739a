// Every module of the product, in a fixed order.
#include <CLI/CLI.hpp>

#include <stdexcept>

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
ModulePtr make_pp_module();
ModulePtr make_advise_module();
ModulePtr make_dp_module();
ModulePtr make_compare_module();
ModulePtr make_check_module();
ModulePtr make_stress_module();

std::vector<ModulePtr> make_modules() {
  std::vector<ModulePtr> m;
  m.push_back(make_env_module());
  m.push_back(make_bandwidth_module());
  m.push_back(make_allreduce_module());
  m.push_back(make_matmul_module());
  m.push_back(make_seqlen_module());
  m.push_back(make_tp_module());
  m.push_back(make_pp_module());
  m.push_back(make_advise_module());
  m.push_back(make_dp_module());
  m.push_back(make_compare_module());
  m.push_back(make_check_module());
  m.push_back(make_stress_module());
  return m;
}

ModulePtr make_module(const std::string& name) {
  for (ModulePtr& m : make_modules())
    if (m->name() == name) return std::move(m);
  throw std::logic_error("no module is called " + name);
}

}  // namespace gpubench
