/* uvm-tool top (tools/top.cpp), called from uvm-tool's C main. */
#ifndef UVM_TOOLS_TOP_H
#define UVM_TOOLS_TOP_H

#ifdef __cplusplus
extern "C" {
#endif

/* argv[0] is "top". Returns the process's exit status. */
int uvm_tool_top(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
