# Warnings live in an INTERFACE target that every target links.
add_library(ipd_warnings INTERFACE)
target_compile_options(ipd_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition -Wvla
  -Wformat=2 -Wimplicit-fallthrough -Wundef -Wcast-qual -Wwrite-strings
  -fno-common)
if(IPD_WERROR)
  target_compile_options(ipd_warnings INTERFACE -Werror)
endif()
