#include "kvgov/cli/cli.h"

int main(int argc, char** argv) { return kvgov::cli::Run(argc, argv); }
