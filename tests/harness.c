typedef int rl_placeholder;
