;;; forj-hooks-test.el --- The user's own hooks around calls and turns  -*- lexical-binding: t; -*-

;;; Commentary:

;; The hooks of forj-hooks.el on real turns: a scripted model, the real
;; worker.  A hook denies a call and the model reads why; a hook adds a
;; note to a result; a hook runs when the turn ends; and a project's
;; .dir-locals.el cannot add a hook, even when the user accepts it.

;;; Code:

(require 'ert)
(require 'forj-loop)
(require 'forj-hooks)
(require 'forj-epc-test)
(require 'forj-chat-test)

(defun forj-hooks-test--turn (root replies &optional before)
  "Run a turn of the scripted REPLIES on ROOT; return the chat's record.
BEFORE, if given, is called in the chat's buffer before the message is
sent."
  (let ((script (forj-chat-test--script replies))
        (forj-provider-scripted-delay 0.001))
    (unwind-protect
        (with-temp-buffer
          (setq default-directory root)
          (let ((output (point-marker)))
            (setq forj-session
                  (forj-session-create
                   :root root :root-confirmed t
                   :provider (list :name "test-script" :family 'scripted :script script)
                   :view-function (lambda (event &rest _)
                                    (pcase event
                                      ('output output)
                                      ('output-to nil)
                                      ('draft "")))))
            (when before (funcall before))
            (forj-loop-send "Go.")
            (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 60))
            (forj-session-record forj-session)))
      (delete-file script))))

(defun forj-hooks-test--results (record)
  "The results of the first tool section of RECORD, parsed, by call id."
  (let ((text (plist-get (cl-find "tool" record :key (lambda (e) (plist-get e :role)) :test #'equal)
                         :text))
        (start 0)
        (found nil))
    (should text)
    (while (string-match "```tool-result\n\\(.*\\)\n```" text start)
      (setq start (match-end 0))
      (let ((result (json-parse-string (match-string 1 text) :object-type 'plist :array-type 'list)))
        (push (cons (plist-get result :id) result) found)))
    (nreverse found)))

(defconst forj-hooks-test--two-calls
  (list (list :text (concat "Two calls.\n\n"
                            (forj-chat-test--block
                             "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"secret.txt\", \"content\": \"x\\n\"}}")
                            "\n"
                            (forj-chat-test--block
                             "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}")))
        (list :text "Done."))
  "A model that writes secret.txt, then reads notes.txt, in one batch.")

(defun forj-hooks-test--no-secrets (call _root)
  "Deny CALL when it writes secret.txt."
  (when (and (equal (plist-get call :name) "write_file")
             (equal (plist-get (plist-get call :args) :path) "secret.txt"))
    "secret.txt is mine: write your notes elsewhere"))

(ert-deftest forj-test-hooks-before-call-denies-and-the-model-reads-the-reason ()
  "A before-call hook denies one call: nothing of it runs, the model reads the reason.
The other call of the batch runs."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((forj-before-tool-call-functions (list #'forj-hooks-test--no-secrets))
           (results (forj-hooks-test--results (forj-hooks-test--turn root forj-hooks-test--two-calls)))
           (write (cdr (assoc "w1" results)))
           (read (cdr (assoc "r1" results))))
      (should (eq (plist-get write :ok) :false))
      (should (string-match-p "secret.txt is mine: write your notes elsewhere"
                              (plist-get (plist-get write :error) :message)))
      (should-not (file-exists-p (expand-file-name "secret.txt" root)))
      (should (eq (plist-get read :ok) t))
      (should (string-match-p "remember the milk" (plist-get (plist-get read :result) :content))))))

(ert-deftest forj-test-hooks-a-failing-before-call-hook-denies-the-call ()
  "A before-call hook that signals an error denies the call: a broken check lets nothing through."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((forj-before-tool-call-functions
            (list (lambda (call _root)
                    (when (equal (plist-get call :name) "write_file") (error "Broken check")))))
           (results (forj-hooks-test--results (forj-hooks-test--turn root forj-hooks-test--two-calls)))
           (write (cdr (assoc "w1" results))))
      (should (eq (plist-get write :ok) :false))
      (should (string-match-p "Broken check" (plist-get (plist-get write :error) :message)))
      (should-not (file-exists-p (expand-file-name "secret.txt" root))))))

(ert-deftest forj-test-hooks-after-result-adds-a-note-the-model-reads ()
  "An after-result hook's note goes with that result, as the model reads it."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((forj-after-tool-result-functions
            (list (lambda (call result _root)
                    (when (and (equal (plist-get call :name) "read_file") (eq (plist-get result :ok) t))
                      "the user's hook read this too"))))
           (results (forj-hooks-test--results
                     (forj-hooks-test--turn
                      root
                      (list (list :text (forj-chat-test--block
                                         "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}"))
                            (list :text "Done.")))))
           (read (cdr (assoc "r1" results))))
      (should (eq (plist-get read :ok) t))
      (should (equal (plist-get read :user_hook_notes) '("the user's hook read this too"))))))

(ert-deftest forj-test-hooks-turn-end-hook-runs-in-the-chat-with-its-root ()
  "The turn-end hook runs once when the turn ends, in the chat, told the root."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((told nil)
           (forj-turn-end-functions (list (lambda (info) (push (list info (current-buffer)) told)))))
      (forj-hooks-test--turn root (list (list :text "Hello.")))
      (should (= (length told) 1))
      (let ((info (car (car told))))
        (should (equal (plist-get info :root) root))
        (should (eq (plist-get info :buffer) (cadr (car told))))
        (should (null (plist-get info :reason)))))))

(defun forj-hooks-test--deny-all (_call _root)
  "Deny every call."
  "denied by the project's hook")

(ert-deftest forj-test-hooks-a-projects-dir-locals-cannot-add-a-hook ()
  "A .dir-locals.el setting a hook is ignored: the variables are risky,
and even a value the user accepted into the buffer is never run."
  (forj-test-with-project
      '(("notes.txt" . "remember the milk\n")
        (".dir-locals.el" . "((nil . ((forj-before-tool-call-functions . (forj-hooks-test--deny-all))\n         (forj-after-tool-result-functions . (forj-hooks-test--deny-all))\n         (forj-turn-end-functions . (forj-hooks-test--deny-all)))))\n"))
    (dolist (hook '(forj-before-tool-call-functions forj-after-tool-result-functions
                                                    forj-turn-end-functions))
      (should (risky-local-variable-p hook)))
    (let* ((applied nil)
           (results
            (forj-hooks-test--results
             (forj-hooks-test--turn
              root
              (list (list :text (forj-chat-test--block
                                 "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}"))
                    (list :text "Done."))
              (lambda ()
                ;; Emacs's own rule: a risky variable is not set from a
                ;; .dir-locals.el without asking.
                (let ((enable-local-variables :safe))
                  (hack-dir-local-variables-non-file-buffer))
                (should-not (local-variable-p 'forj-before-tool-call-functions))
                ;; And when the user lets everything in, forj still runs
                ;; only the global value.
                (let ((enable-local-variables :all))
                  (hack-dir-local-variables-non-file-buffer))
                (setq applied (local-variable-p 'forj-before-tool-call-functions))))))
           (read (cdr (assoc "r1" results))))
      (should applied)
      (should (eq (plist-get read :ok) t))
      (should-not (plist-member read :user_hook_notes)))))

(provide 'forj-hooks-test)
;;; forj-hooks-test.el ends here
