;;; epc-bench.el --- Round trips through forj-epc.el, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by bench/run.py: starts the worker for the directory in
;; $FORJ_BENCH_ROOT with the Python in $FORJ_PYTHON, then prints one
;; measurement a line, as NAME VALUE:
;;   ping MS         the median no-op round trip (`ping')
;; and for each of code.py and big.txt in the root (run.py puts 1 MB
;; files there and raises the read limits in $FORJ_CONFIG), NAME being
;; the file's:
;;   NAME_bytes N    the file's size
;;   NAME_json MS    `read_file' round trip (plan + execute) over JSON
;;                   frames, median: the worker's reply handed to
;;                   `json-parse-buffer' where it lies, its long string
;;                   (the file's content) sent raw after the JSON
;;   NAME_inline MS  the same with the reply's long strings inside its
;;                   JSON (a connection that did not offer raw strings)
;;   NAME_epc MS     the same over standard EPC frames (a second
;;                   connection that did not ask for JSON frames): the
;;                   reply read as a Lisp string, then parsed
;;   NAME_ref MS     the reference: Emacs reading the execute reply's
;;                   JSON text from a file and parsing it with
;;                   `json-parse-buffer', median

;;; Code:

(require 'forj-worker)

(defun forj-bench--median (samples)
  "The median of SAMPLES, in milliseconds."
  (* 1000 (nth (/ (length samples) 2) (sort samples #'<))))

(defun forj-bench--time (n warmup thunk)
  "Call THUNK WARMUP times, then N times; the median time in milliseconds."
  (dotimes (_ warmup) (funcall thunk))
  (let ((samples nil))
    (dotimes (_ n)
      (let ((t0 (float-time)))
        (funcall thunk)
        (push (- (float-time) t0) samples)))
    (forj-bench--median samples)))

(defun forj-bench--read-file (conn path)
  "Plan and execute a `read_file' of PATH on CONN; the execute reply."
  (let* ((plan (forj-epc-call-sync
                conn "plan"
                `(:calls [(:id "1" :name "read_file" :args (:path ,path :max_bytes 4000000))])
                :timeout 60))
         (reply (forj-epc-call-sync
                 conn "execute"
                 `(:batch_id ,(plist-get plan :batch_id) :capacity_bytes 4000000)
                 :timeout 60)))
    (unless (eq (plist-get (aref (plist-get reply :results) 0) :ok) t)
      (error "The read failed: %S" reply))
    reply))

(defun forj-bench--standard-connection (worker &optional json-inline)
  "A second connection to WORKER that keeps to standard EPC frames.
With JSON-INLINE, one that takes JSON frames but no raw strings."
  (let* ((port (process-contact (forj-epc-connection-process (forj-worker-connection worker))
                                :service))
         (conn (forj-epc-connect port :name "bench-standard"))
         (forj-epc-json-frames json-inline)
         (forj-epc-raw-strings nil))
    (forj-epc-call-sync conn "hello" (list :token (forj-worker-token worker)) :timeout 30)
    conn))

(let* ((forj-worker-python (getenv "FORJ_PYTHON"))
       (root (getenv "FORJ_BENCH_ROOT"))
       (worker nil))
  (forj-worker-ensure root (lambda (w) (setq worker w))
                      (lambda (e) (error "Worker failed: %S" e)))
  (while (not worker) (accept-process-output nil 0.05))
  (let ((conn (forj-worker-connection worker)))
    (princ (format "ping %.4f\n"
                   (forj-bench--time 2000 200 (lambda () (forj-epc-call-sync conn "ping" nil)))))
    (let ((standard (forj-bench--standard-connection worker))
          (inline (forj-bench--standard-connection worker t)))
      (dolist (name '("code.py" "big.txt"))
        (let ((file (expand-file-name name root))
              (key (file-name-sans-extension name)))
          (when (file-exists-p file)
            (princ (format "%s_bytes %d\n" key (file-attribute-size (file-attributes file))))
            (princ (format "%s_json %.1f\n" key
                           (forj-bench--time 30 3 (lambda () (forj-bench--read-file conn name)))))
            (princ (format "%s_inline %.1f\n" key
                           (forj-bench--time 30 3 (lambda () (forj-bench--read-file inline name)))))
            (princ (format "%s_epc %.1f\n" key
                           (forj-bench--time 30 3 (lambda () (forj-bench--read-file standard name)))))
            (let ((text (make-temp-file "forj-bench-reply" nil ".json")))
              (unwind-protect
                  (progn
                    (let ((coding-system-for-write 'utf-8-unix))
                      (with-temp-file text
                        (insert (json-serialize (forj-bench--read-file conn name)
                                                :null-object :null :false-object :false))))
                    (princ (format "%s_ref %.1f\n" key
                                   (forj-bench--time
                                    30 3
                                    (lambda ()
                                      (with-temp-buffer
                                        (set-buffer-multibyte nil)
                                        (insert-file-contents-literally text)
                                        (json-parse-buffer :object-type 'plist :array-type 'array
                                                           :null-object :null
                                                           :false-object :false)))))))
                (delete-file text))))))
      (forj-epc-close standard)
      (forj-epc-close inline)))
  (forj-worker-stop root))

;;; epc-bench.el ends here
