/*
 * tokenize: `gptd tokenize`, text files to llm.c token shards (tokenize.c).
 */
#ifndef GPTD_TOKENIZE_H
#define GPTD_TOKENIZE_H

/* Returns the process exit status. Runs on the main thread; starts and
 * joins its own encoding threads. */
int gptd_tokenize_main(int argc, char **argv);

#endif
