# Model gateway benchmark: first byte and streamed chunk gaps through the
# gateway against straight to a fake provider, and CPU per proxied MiB.
#   cmake --build build --target bench_gateway
#   build/bench/bench_gateway [calls]
if(TARGET runnel_worker_stages)
  add_executable(bench_gateway ${CMAKE_CURRENT_LIST_DIR}/bench_gateway.c)
  target_link_libraries(bench_gateway PRIVATE runnel_worker_stages)
endif()
