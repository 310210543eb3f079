/* The weight types the integer kernels take, each as (type, function-name suffix): the one list
 * that the kernel instances (qdot_kernels.h) and kvp_qdot_supported (qdot.c) both expand. */
#ifndef KVP_QDOT_TYPES_H
#define KVP_QDOT_TYPES_H

#define QDOT_TYPES(X)                                                                                                  \
    X(KVP_TYPE_Q4_0, q4_0) X(KVP_TYPE_Q4_1, q4_1) X(KVP_TYPE_Q5_0, q5_0) X(KVP_TYPE_Q5_1, q5_1) X(KVP_TYPE_Q8_0, q8_0)  \
    X(KVP_TYPE_Q2_K, q2_k) X(KVP_TYPE_Q3_K, q3_k) X(KVP_TYPE_Q4_K, q4_k) X(KVP_TYPE_Q5_K, q5_k) X(KVP_TYPE_Q6_K, q6_k)  \
    X(KVP_TYPE_Q4_K_LB, q4_k_lb) X(KVP_TYPE_Q6_K_LB, q6_k_lb)

#endif
