# SPDX-License-Identifier: Apache-2.0
# The test docs/options (tools/CMakeLists.txt): docs/options.md must be exactly what the option table
# prints (`dmm options --markdown`). Run as cmake -DDMM_CLI=... -DDMM_DOC=... -DDMM_OUT=... -P this file.
execute_process(COMMAND ${DMM_CLI} options --markdown OUTPUT_FILE ${DMM_OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "`${DMM_CLI} options --markdown` failed (exit ${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DMM_OUT} ${DMM_DOC} RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "${DMM_DOC} differs from what the option table (src/core/options.c) prints: it is "
                      "generated, not edited. Regenerate it with\n  ${DMM_CLI} options --markdown > ${DMM_DOC}\n"
                      "(the table's version is at ${DMM_OUT}; diff the two to see what changed)")
endif()
