export default {
  test: {
    abort(reason) {
      throw new Error(`test aborted: ${reason}`);
    },
  },
};
