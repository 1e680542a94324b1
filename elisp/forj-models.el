;;; forj-models.el --- The model of a chat, and the models local servers offer  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `forj-set-model' switches the provider and model of a chat, from its
;; next request on: it completes over the models of every provider that
;; can be used now (its key is found, or it is a local server), the
;; current one marked.  A provider's models are its :model and what its
;; server lists: for a local server GET URL/models (the OpenAI-compatible
;; listing of llama.cpp, vLLM, LM Studio, Ollama) or, when that fails,
;; Ollama's own /api/tags; for a cloud provider its models endpoint
;; (Gemini's GET /v1beta/models, Anthropic's and OpenAI's GET /v1/models),
;; with its key.  Until a server has answered, or when it cannot be
;; reached, the provider's :models stand in: the models known when forj
;; was released.  Listing runs curl in an asynchronous process: the
;; completion shows what has arrived so far, and TAB again shows models
;; listed meanwhile.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj-provider)
(require 'forj-session)


(defcustom forj-models-list-timeout 5
  "Seconds a server may take to list its models."
  :type 'number
  :group 'forj)

(defvar forj-models--listed (make-hash-table :test #'equal)
  "Provider name -> the models its server listed last.")

(defvar forj-models--failed (make-hash-table :test #'equal)
  "Provider name -> why its server could not list its models, last time asked.")

;;; Listing a server's models

(defun forj-models-parse (text)
  "The model names in TEXT, a listing of an OpenAI-compatible server or of Ollama.
Return nil when TEXT is neither."
  (let* ((json (ignore-errors (forj-provider-json text)))
         (items (and (consp json) (or (plist-get json :data) (plist-get json :models)))))
    (when (vectorp items)
      (delete-dups
       (delq nil (mapcar (lambda (item)
                           (let ((name (or (plist-get item :id) (plist-get item :name)
                                           (plist-get item :model))))
                             (and (stringp name) (not (string-empty-p name)) name)))
                         items))))))

(defun forj-models--get (url callback &optional headers secret-headers)
  "GET URL with curl, asynchronously; CALLBACK gets the HTTP status and the body.
HEADERS go on curl's command line, SECRET-HEADERS (the key) through
its standard input.  The status is nil when nothing answered; the
body is then curl's message."
  (let* ((out (generate-new-buffer " *forj-models*" t))
         (process-connection-type nil)
         (process
          (make-process
           :name "forj-models"
           :buffer out
           :noquery t
           :connection-type 'pipe
           :coding 'utf-8-unix
           :command (append (list forj-provider-curl-program "-q" "--silent" "--show-error"
                                  "--max-time" (number-to-string forj-models-list-timeout)
                                  "--config" "-"
                                  "--write-out" "\n%{http_code}")
                            (cl-loop for header in headers append (list "--header" header))
                            (list url))
           :sentinel
           (lambda (process _event)
             (unless (process-live-p process)
               (let* ((text (with-current-buffer out (buffer-string)))
                      (status (and (string-match "\n\\([0-9]+\\)\\'" text)
                                   (string-to-number (match-string 1 text))))
                      (body (if status (substring text 0 (match-beginning 0)) (string-trim text))))
                 (kill-buffer out)
                 (funcall callback (and status (> status 0) status) body)))))))
    (process-send-string
     process
     (mapconcat (lambda (header) (concat "header = \"" (replace-regexp-in-string "[\"\\\\]" "\\\\\\&" header)
                                         "\"\n"))
                secret-headers ""))
    (process-send-eof process)
    process))

(defun forj-models--tags-url (url)
  "Ollama's /api/tags for a server whose OpenAI-compatible API is at URL."
  (concat (string-remove-suffix "/v1" (string-remove-suffix "/" url)) "/api/tags"))

(defun forj-models-list (provider callback)
  "Ask the server of PROVIDER for the models it has, in the background.
CALLBACK gets the list of names, or nil and a message saying why there
is none.  A local server is asked URL/models, then Ollama's
/api/tags; a cloud provider its models endpoint, with its key."
  (let* ((name (plist-get provider :name))
         (done (lambda (models why)
                 ;; One line: curl's message ends in a newline, and a
                 ;; completion annotation must not break the list.
                 (when why
                   (setq why (string-trim (replace-regexp-in-string "[ \t\n\r]+" " " why))))
                 (if models
                     (progn (puthash name models forj-models--listed)
                            (remhash name forj-models--failed))
                   (puthash name why forj-models--failed))
                 (funcall callback models why))))
    (if (plist-get provider :local)
        (forj-models--list-local provider done)
      (forj-models--list-cloud provider done))))

(defun forj-models--list-local (provider done)
  "Ask the local server of PROVIDER for its models; call DONE with them or why not."
  (let ((url (string-remove-suffix "/" (or (plist-get provider :url) ""))))
    (forj-models--get
     (concat url "/models")
     (lambda (status body)
       (let ((models (and (eql status 200) (forj-models-parse body))))
         (if models
             (funcall done models nil)
           (forj-models--get
            (forj-models--tags-url url)
            (lambda (tags-status tags-body)
              (let ((tags (and (eql tags-status 200) (forj-models-parse tags-body))))
                (funcall done tags
                         (and (null tags)
                              (cond
                               ((null status) (format "%s does not answer: %s" url body))
                               (t (format "%s/models answered HTTP %d with no models" url status))))))))))))))

(defun forj-models--chat-model-p (provider name)
  "Whether the model NAME of PROVIDER can chat.
OpenAI's own list also has embedding, speech, image and moderation
models; other servers list only what they serve."
  (or (not (equal (forj-provider-host (plist-get provider :url)) "api.openai.com"))
      (and (string-match-p "\\`\\(gpt-\\|o[0-9]\\|chatgpt-\\)" name)
           (not (string-match-p
                 "\\(audio\\|realtime\\|tts\\|transcribe\\|image\\|search\\|instruct\\|embedding\\)"
                 name)))))

(defun forj-models-parse-cloud (provider text)
  "The chat models in TEXT, the models listing of PROVIDER's family.
Gemini lists (models/NAME, supportedGenerationMethods); Anthropic
and OpenAI list (data[].id)."
  (let* ((json (ignore-errors (forj-provider-json text))))
    (when (consp json)
      (pcase (plist-get provider :family)
        ('gemini
         (delq nil (mapcar (lambda (item)
                             (let ((name (plist-get item :name))
                                   (methods (append (plist-get item :supportedGenerationMethods) nil)))
                               (and (stringp name)
                                    ;; Without the field, the model is taken.
                                    (or (null (plist-get item :supportedGenerationMethods))
                                        (member "generateContent" methods))
                                    (string-remove-prefix "models/" name))))
                           (append (plist-get json :models) nil))))
        (_
         (cl-remove-if-not (lambda (name) (forj-models--chat-model-p provider name))
                           (forj-models-parse text)))))))

(defun forj-models--next-page (provider text)
  "The query for the page after TEXT, a models listing of PROVIDER, or nil.
Gemini says nextPageToken; Anthropic has_more and last_id."
  (let ((json (ignore-errors (forj-provider-json text))))
    (when (consp json)
      (pcase (plist-get provider :family)
        ('gemini (let ((token (plist-get json :nextPageToken)))
                   (and (stringp token) (not (string-empty-p token))
                        (concat "?pageToken=" (url-hexify-string token)))))
        ('anthropic (let ((last (plist-get json :last_id)))
                      (and (eq (plist-get json :has_more) t) (stringp last)
                           (concat "?after_id=" (url-hexify-string last)))))))))

(defun forj-models--list-cloud (provider done &optional query found pages)
  "Ask the cloud PROVIDER's models endpoint for its models; call DONE.
QUERY asks for a page after the first; FOUND holds the models of the
pages before, PAGES counts them (at most 20 are read)."
  (let* ((url (string-remove-suffix "/" (or (plist-get provider :url) "")))
         (key (forj-provider-key provider))
         (family (plist-get provider :family))
         (pages (or pages 0)))
    (if (or (null key) (not (memq family '(openai anthropic gemini))))
        (funcall done nil (if key "no models endpoint" "no key"))
      (forj-models--get
       (concat url "/models" query)
       (lambda (status body)
         (let* ((body (funcall (forj-provider-redactor key) body))
                (models (append found (and (eql status 200) (forj-models-parse-cloud provider body))))
                (next (and (eql status 200) (< pages 19) (forj-models--next-page provider body))))
           (if next
               (forj-models--list-cloud provider done next models (1+ pages))
             (funcall done models
                      (and (null models)
                           (if status
                               (format "its models endpoint answered HTTP %d; the list known offline is shown"
                                       status)
                             "its models endpoint does not answer; the list known offline is shown"))))))
       (and (eq family 'anthropic) (list "anthropic-version: 2023-06-01"))
       (list (pcase family
               ('gemini (concat "x-goog-api-key: " key))
               ('anthropic (concat "x-api-key: " key))
               (_ (concat "Authorization: Bearer " key))))))))

(defun forj-models-refresh (&optional callback)
  "Ask every usable provider in `forj-providers' for its models, in the background.
Local servers and the cloud providers whose key is found are asked.
CALLBACK, if given, is called with each provider's name when it answers."
  (dolist (entry forj-providers)
    (let ((provider (forj-provider-get (car entry))))
      (when (and (plist-get provider :url)
                 (not (eq (plist-get provider :family) 'scripted))
                 (forj-provider-usable-p provider))
        (forj-models-list provider (lambda (&rest _)
                                     (when callback (funcall callback (car entry)))))))))

;;; Choosing

(defun forj-models-of (provider)
  "Return the models of PROVIDER as far as forj knows.
Its :model first, then what its server listed last; until a server
has listed any, its :models (the list known when forj was released)."
  (let ((listed (gethash (plist-get provider :name) forj-models--listed)))
    (delete-dups (delq nil (append (list (plist-get provider :model))
                                   (copy-sequence (or listed (plist-get provider :models))))))))

(defun forj-models-candidates ()
  "Every model of every provider usable now: an alist (LABEL NAME MODEL).
LABEL is \"NAME/MODEL\", or NAME for a provider without models."
  (cl-loop for (name . _) in forj-providers
           for provider = (forj-provider-get name)
           when (forj-provider-usable-p provider)
           append (let ((models (forj-models-of provider)))
                    (if models
                        (mapcar (lambda (model) (list (concat name "/" model) name model)) models)
                      (list (list name name nil))))))

(defun forj-models--current-label ()
  "The label of the current chat's provider and model, or nil."
  (let ((provider (and forj-session (forj-session-provider forj-session))))
    (when provider
      (if (plist-get provider :model)
          (concat (plist-get provider :name) "/" (plist-get provider :model))
        (plist-get provider :name)))))

(defun forj-models-read (prompt)
  "Read a provider and model with PROMPT; return (NAME MODEL).
Completes over `forj-models-candidates' as they are when asked, so
models a local server lists meanwhile show on the next TAB.  A model
not listed may be typed as NAME/MODEL."
  (let* ((current (forj-models--current-label))
         (table (lambda (string predicate action)
                  (if (eq action 'metadata)
                      `(metadata (category . forj-model)
                                 (display-sort-function . identity)
                                 (annotation-function
                                  . ,(lambda (label)
                                       (let ((name (car (split-string label "/"))))
                                         (cond ((equal label current) "  ← current")
                                               ((gethash name forj-models--failed)
                                                (format "  (%s)" (gethash name forj-models--failed)))
                                               (t ""))))))
                    (complete-with-action action (mapcar #'car (forj-models-candidates))
                                          string predicate))))
         (label (completing-read prompt table nil nil nil nil current))
         (known (assoc label (forj-models-candidates))))
    (cond
     (known (cdr known))
     ((string-match "\\`\\([^/]+\\)/\\(.+\\)\\'" label)
      (let ((name (match-string 1 label)) (model (match-string 2 label)))
        (unless (forj-provider-get name)
          (user-error "No provider named %s in `forj-providers' (M-x forj-setup adds one)" name))
        (list name model)))
     (t (user-error "Choose one of the listed models, or type PROVIDER/MODEL")))))

;;;###autoload
(defun forj-set-model (name model)
  "Talk to MODEL of the provider NAME in this chat, from the next request on.
Interactively, choose among the models of every provider usable now
\(the current one is marked); local servers are asked which models
they offer, in the background."
  (interactive
   (progn
     (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
     (forj-models-refresh)
     (forj-models-read "Model (provider/model): ")))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (let ((provider (forj-provider-get name)))
    (unless provider (user-error "No provider named %s in `forj-providers'" name))
    (unless (forj-provider-usable-p provider)
      (user-error "%s has no API key yet: M-x forj-setup stores one" name))
    (setf (forj-session-provider forj-session) (if model (plist-put provider :model model) provider))
    (force-mode-line-update)
    (forj-session-notice (format "model: %s%s, from the next request on"
                                 name (if model (concat " " model) "")))))

(provide 'forj-models)
;;; forj-models.el ends here
