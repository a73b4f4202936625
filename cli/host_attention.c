/* in progress */
typedef int host_attention_placeholder;
