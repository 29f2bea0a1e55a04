# ACP benchmark: claim -> first model request and enqueue -> first step of
# Claude Code and Codex runs, cold and on warm agents (RUNNEL_WARM_AGENTS)
# side by side, one at a time and 4 at once, against the fake providers of
# tests/acp, and what an idle warm agent costs.  Needs the agents installed (agents/install.sh PREFIX; the
# acp_agents test does it into <build>/agents).  Run a Release build
# without sanitizers for figures worth quoting:
#   cmake --build build-rel --target bench_acp
#   agents/install.sh $PWD/build-rel/agents
#   build-rel/bench/bench_acp build-rel/agents $(command -v node) [--runs 50] [--agents claude,codex]
# With --refill N instead: a CPU-bound run in flight with a warm Claude
# agent's pool full and idle, and while the pool refills beside it.
# See docs/worker.md ("Time to the first model request", "Warm agents").
# Included by tests/acp/CMakeLists.txt, which defines the fixture library.
if(TARGET runnel_acptest)
  add_executable(bench_acp ${CMAKE_CURRENT_LIST_DIR}/bench_acp.c)
  target_link_libraries(bench_acp PRIVATE runnel_acptest)
  set_target_properties(bench_acp PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  add_dependencies(bench_acp runnel-worker runnel-mock-agent)
endif()
