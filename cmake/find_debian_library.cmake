# SPDX-License-Identifier: Apache-2.0
# cmake/find_debian_library.cmake — one way to find a library the build needs from a Debian package:
#   dmm_find_debian_library(TARGET LIB HEADER PACKAGE HOW_TO_SKIP)
# defines the INTERFACE target TARGET (the library LIB and the folder of HEADER), searching the usual
# places and CMAKE_PREFIX_PATH (the GPU machine's unpacked .deps); missing, it stops the configure with
# a sentence naming the Debian PACKAGE, scripts/bootstrap.sh, and HOW_TO_SKIP (the options that need it).
function(dmm_find_debian_library target lib header package how_to_skip)
  string(TOUPPER ${lib} up)
  find_library(DMM_${up}_LIB ${lib})
  find_path(DMM_${up}_INC ${header})
  if(NOT DMM_${up}_LIB OR NOT DMM_${up}_INC)
    message(FATAL_ERROR "${lib} not found: run scripts/bootstrap.sh (Debian: apt-get install ${package}), "
                        "or configure with ${how_to_skip}")
  endif()
  add_library(${target} INTERFACE)
  target_link_libraries(${target} INTERFACE ${DMM_${up}_LIB})
  target_include_directories(${target} INTERFACE ${DMM_${up}_INC})
endfunction()
