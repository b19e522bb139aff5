# The HTTP listener (daemon/http.c) scraped by a real Prometheus.
add_test(NAME http_prometheus
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/http_prometheus.sh $<TARGET_FILE:gptd>
                 $<TARGET_FILE:gptctl> $<TARGET_FILE:itest_client> ${CMAKE_SOURCE_DIR})
set_tests_properties(http_prometheus PROPERTIES LABELS integration TIMEOUT 180
                     ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
